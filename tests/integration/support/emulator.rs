//! The ES emulator process and its typed control client (filled by the emulator work).
