//! cargo-fuzz target `sse`: see `mcp_wire::fuzzing::sse`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_wire::fuzzing::sse(data));
