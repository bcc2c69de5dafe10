//! cargo-fuzz target `jsonrpc`: see `mcp_wire::fuzzing::jsonrpc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_wire::fuzzing::jsonrpc(data));
