//! The request a thread is serving, so that events emitted deep inside a request (pool
//! checkouts, bulk requests) name it without every caller passing it along.

use std::cell::RefCell;

thread_local! {
    static REQUEST_ID: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Marks this thread as serving `request_id` until the guard drops.
pub fn enter(request_id: &str) -> Guard {
    REQUEST_ID.with(|r| *r.borrow_mut() = Some(request_id.to_string()));
    Guard(())
}

/// The request this thread serves, if any.
pub fn request_id() -> Option<String> {
    REQUEST_ID.with(|r| r.borrow().clone())
}

pub struct Guard(());

impl Drop for Guard {
    fn drop(&mut self) {
        REQUEST_ID.with(|r| *r.borrow_mut() = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_to_the_guard() {
        assert_eq!(request_id(), None);
        {
            let _g = enter("r1");
            assert_eq!(request_id().as_deref(), Some("r1"));
        }
        assert_eq!(request_id(), None);
    }
}
