//! The console in headless Chromium.
