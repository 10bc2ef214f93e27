//! Interop tests only: see tests/.
