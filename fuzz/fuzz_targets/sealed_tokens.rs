//! cargo-fuzz target `sealed_tokens`: see `mcp_http::fuzzing::sealed_tokens`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| mcp_http::fuzzing::sealed_tokens(data));
