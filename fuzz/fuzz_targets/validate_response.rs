//! cargo-fuzz target `validate_response`: see `elicitation_core::fuzzing::validate`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| elicitation_core::fuzzing::validate(data));
