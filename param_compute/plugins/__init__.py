"""Plugins: the interfaces workloads implement, per-toolchain registries, and loading them."""
