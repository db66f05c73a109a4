//! Multi-query associative recall (MQAR) data.
