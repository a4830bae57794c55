//! Real redis-server processes for tests (being built).
