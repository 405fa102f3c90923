"""flyteplugins.nsight."""
