//! cargo-fuzz target `rest_bodies`: see `mcp_http::fuzzing::rest_bodies`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_http::fuzzing::rest_bodies(data));
