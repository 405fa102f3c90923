"""Pure analyses of a capture: Polars frames in, Pydantic models or frames out; no I/O, no nsys."""
