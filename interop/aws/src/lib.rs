//! Interop tests only: see `tests/` and `jobs_device.py`.
