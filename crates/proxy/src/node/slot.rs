//! Reply slots: where a node connection puts the reply of one request for
//! the client task that waits for it.
//!
//! A slot is a one-shot channel for one worker thread: both ends live on
//! the same thread (node connections and sessions of a worker never leave
//! it), so handing a reply over takes no atomic operation and no lock —
//! the sender stores the reply and wakes the waiting task.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The sending end was dropped without a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dropped;

enum State<T> {
    Waiting(Option<Waker>),
    Filled(T),
    Taken,
}

/// Where the value goes; dropping it unfilled makes the receiver see
/// [`Dropped`].
pub struct SlotTx<T>(Rc<RefCell<State<T>>>);

/// Waits for the value; a future that resolves once.
pub struct SlotRx<T>(Rc<RefCell<State<T>>>);

/// A new empty slot.
pub fn slot<T>() -> (SlotTx<T>, SlotRx<T>) {
    let state = Rc::new(RefCell::new(State::Waiting(None)));
    (SlotTx(state.clone()), SlotRx(state))
}

// === impl SlotTx ===

impl<T> SlotTx<T> {
    /// Stores the value and wakes the receiver. Dropped silently when the
    /// receiver is gone.
    pub fn send(self, value: T) {
        self.fill(value);
    }

    /// Whether the receiver is gone (nobody waits for the value).
    pub fn is_closed(&self) -> bool {
        Rc::strong_count(&self.0) == 1
    }

    fn fill(&self, value: T) {
        let waker = {
            let mut state = self.0.borrow_mut();
            match std::mem::replace(&mut *state, State::Filled(value)) {
                State::Waiting(waker) => waker,
                // Filled already (cannot happen: `send` takes the sender)
                // or taken: keep what was there.
                old => {
                    *state = old;
                    None
                }
            }
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl<T> Drop for SlotTx<T> {
    fn drop(&mut self) {
        let waker = match &mut *self.0.borrow_mut() {
            State::Waiting(waker) => waker.take(),
            _ => None,
        };
        // Still waiting: the receiver sees `Dropped` when polled again.
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

// === impl SlotRx ===

impl<T> Future for SlotRx<T> {
    type Output = Result<T, Dropped>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let sender_gone = Rc::strong_count(&self.0) == 1;
        let mut state = self.0.borrow_mut();
        match &mut *state {
            State::Waiting(_) if sender_gone => {
                *state = State::Taken;
                Poll::Ready(Err(Dropped))
            }
            State::Waiting(waker) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            State::Filled(_) => match std::mem::replace(&mut *state, State::Taken) {
                State::Filled(value) => Poll::Ready(Ok(value)),
                _ => unreachable!("matched Filled above"),
            },
            State::Taken => Poll::Ready(Err(Dropped)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn poll<T>(rx: &mut SlotRx<T>, waker: &Waker) -> Poll<Result<T, Dropped>> {
        Pin::new(rx).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn a_sent_value_wakes_the_waiting_receiver_once_and_is_taken() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let (tx, mut rx) = slot::<u32>();
        assert!(poll(&mut rx, &waker).is_pending());
        assert!(poll(&mut rx, &waker).is_pending());
        tx.send(7);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(7)));
    }

    #[test]
    fn a_value_sent_before_the_first_poll_is_ready() {
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let (tx, mut rx) = slot::<&str>();
        tx.send("x");
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok("x")));
    }

    #[test]
    fn a_dropped_sender_wakes_the_receiver_with_dropped() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let (tx, mut rx) = slot::<u32>();
        assert!(poll(&mut rx, &waker).is_pending());
        drop(tx);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Err(Dropped)));
        let (tx, mut rx) = slot::<u32>();
        drop(tx);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Err(Dropped)));
    }

    #[test]
    fn the_sender_sees_a_dropped_receiver() {
        let (tx, rx) = slot::<u32>();
        assert!(!tx.is_closed());
        drop(rx);
        assert!(tx.is_closed());
        tx.send(1); // dropped silently
    }
}
