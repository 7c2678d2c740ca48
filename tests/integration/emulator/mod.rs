//! Tests of the ES protocol emulator (filled by the emulator work).
