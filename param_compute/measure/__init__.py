"""The measuring core: one protocol and one clock seam for everything timed, one measurement."""
