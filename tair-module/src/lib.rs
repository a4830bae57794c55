//! Placeholder: the TairString-compatible Redis module is being built.
