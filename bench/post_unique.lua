-- wrk: POST the JSON body named by BENCH_BODY_FILE, with every "{n}" in it replaced by a
-- number unique to the request (a conversation of its own: an ADK session, say).
local file = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
local template = file:read("*a")
file:close()

local threads = 0
function setup(thread)
   threads = threads + 1
   thread:set("id", threads)
end

local counter = 0
function request()
   counter = counter + 1
   local body = template:gsub("{n}", id .. "-" .. counter)
   return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, body)
end
