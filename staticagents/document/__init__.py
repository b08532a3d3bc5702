"""The fixture format, pure: its schema (``schema``) and reading and writing files (``files``)."""
