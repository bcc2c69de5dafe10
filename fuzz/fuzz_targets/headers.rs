//! cargo-fuzz target `headers`: see `mcp_wire::fuzzing::headers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_wire::fuzzing::headers(data));
