//! What a thread is doing: the request it serves, so that events emitted deep inside a
//! request (pool checkouts, bulk requests) name it without every caller passing it along,
//! and the pooled connections it holds, so that the Elasticsearch client can tell when a
//! request would go out while one is checked out (the house rule it must never break).

use std::cell::RefCell;

thread_local! {
    static REQUEST_ID: RefCell<Option<String>> = const { RefCell::new(None) };
    static HELD: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
}

// `try_with`: a connection dropped while its thread is being torn down must not panic
// (in a destructor that would abort); the record dies with the thread anyway.

/// Records that this thread checked out a connection for `stage`.
pub fn connection_checked_out(stage: &'static str) {
    let _ = HELD.try_with(|h| h.borrow_mut().push(stage));
}

/// Records that this thread returned its connection of `stage`.
pub fn connection_returned(stage: &'static str) {
    let _ = HELD.try_with(|h| {
        let mut held = h.borrow_mut();
        if let Some(i) = held.iter().rposition(|s| *s == stage) {
            held.remove(i);
        }
    });
}

/// The stage of a connection this thread holds right now, if any.
pub fn held_connection() -> Option<&'static str> {
    HELD.try_with(|h| h.borrow().last().copied()).ok().flatten()
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

    #[test]
    fn held_connections_are_per_thread_and_returned_by_stage() {
        assert_eq!(held_connection(), None);
        connection_checked_out("reserve");
        connection_checked_out("auth");
        assert_eq!(held_connection(), Some("auth"));
        std::thread::spawn(|| assert_eq!(held_connection(), None))
            .join()
            .unwrap();
        connection_returned("reserve");
        assert_eq!(held_connection(), Some("auth"));
        connection_returned("auth");
        assert_eq!(held_connection(), None);
    }
}
