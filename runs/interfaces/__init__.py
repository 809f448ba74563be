"""The interfaces of `runs`: REST API, pages and forms, CLI text, and the one public view of a cell
and of a call through which hidden data never leaves."""
