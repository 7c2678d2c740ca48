//! A minimal Chrome DevTools Protocol client.
