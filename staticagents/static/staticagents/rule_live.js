// The admin's rule list: when the rules change elsewhere (another curator, the control
// API, an import), a notice offers a reload. Follows the ruleset announcements of
// /control/journal/live (the admin's session, the rules' view permission).
"use strict";
(function () {
  const notice = document.getElementById("rules-changed");
  if (!notice) return;
  const shown = Number(notice.dataset.version);
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const url = scheme + location.host + "/control/journal/live?ruleset=true";

  function tell(version) {
    notice.textContent = "The rules changed (version " + version + "): ";
    const reload = document.createElement("a");
    reload.href = location.href;
    reload.textContent = "reload";
    notice.appendChild(reload);
    notice.hidden = false;
  }

  function connect() {
    const socket = new WebSocket(url);
    socket.onmessage = function (message) {
      const event = JSON.parse(message.data);
      if (event.type === "subscribed") notice.dataset.following = "true";
      else if (event.type === "ruleset" && event.version > shown) tell(event.version);
    };
    socket.onclose = function (closed) {
      if (closed.code >= 4400 && closed.code < 4500) return; // refused: retrying changes nothing
      setTimeout(connect, 2000);
    };
  }

  connect();
})();
