//! Reply slots: where a node connection puts the reply of one request for
//! the client task that waits for it.
//!
//! A slot is a one-shot channel for one worker thread: both ends live on
//! the same thread (node connections and sessions of a worker never leave
//! it), so handing a reply over takes no atomic operation and no lock —
//! the sender stores the reply and wakes the waiting task.
//!
//! A worker keeps a stock of empty slots for each value type
//! ([`Stocked`]): a slot whose two ends are both gone goes back to it, and
//! the next request takes one from it, so that a request costs no
//! allocation for its slot.
//!
//! A receiver may name a [`Hook`] that is offered the value first: one that
//! takes it (a session's reply written to its client by the node
//! connection that read it) leaves the receiver's task asleep.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::LocalKey;

/// Empty slots a worker keeps for reuse, per value type.
const STOCK_MAX: usize = 1024;

/// The sending end was dropped without a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dropped;

enum State<T> {
    Waiting {
        waker: Option<Waker>,
        hook: Option<Weak<dyn Hook<T>>>,
    },
    Filled(T),
    Taken,
}

/// Offered a slot's value before the receiver: `None` when it took the
/// value (the receiver is not woken, and must no longer wait for it), or
/// the value to store, as it was or changed.
pub trait Hook<T> {
    fn offer(&self, value: T) -> Option<T>;
}

type Shared<T> = Rc<RefCell<State<T>>>;

/// Where the value goes; dropping it unfilled makes the receiver see
/// [`Dropped`].
pub struct SlotTx<T: Stocked>(Shared<T>);

/// Waits for the value; a future that resolves once.
pub struct SlotRx<T: Stocked>(Shared<T>);

/// A worker's empty slots for values of one type.
pub struct Stock<T>(RefCell<Vec<Shared<T>>>);

/// A value type whose slots are reused: names the worker's stock of them
/// (a `thread_local!` holding a [`Stock`]).
pub trait Stocked: Sized + 'static {
    fn stock() -> &'static LocalKey<Stock<Self>>;
}

/// An empty slot: one from the worker's stock, or a new one.
pub fn slot<T: Stocked>() -> (SlotTx<T>, SlotRx<T>) {
    let reused = T::stock()
        .try_with(|stock| stock.0.borrow_mut().pop())
        .ok()
        .flatten();
    let state = reused.unwrap_or_else(|| Rc::new(RefCell::new(State::waiting())));
    (SlotTx(state.clone()), SlotRx(state))
}

/// Called as either end is dropped: the last one empties the slot and
/// gives it to the stock.
fn recycle<T: Stocked>(state: &Shared<T>) {
    if Rc::strong_count(state) != 1 {
        return;
    }
    // Whatever is left (a value never taken, a waker) is dropped here,
    // before the slot is shared again.
    drop(state.replace(State::waiting()));
    let _ = T::stock().try_with(|stock| {
        let mut stock = stock.0.borrow_mut();
        if stock.len() < STOCK_MAX {
            stock.push(state.clone());
        }
    });
}

// === impl State ===

impl<T> State<T> {
    fn waiting() -> State<T> {
        State::Waiting {
            waker: None,
            hook: None,
        }
    }
}

// === impl Stock ===

impl<T> Stock<T> {
    pub const fn new() -> Stock<T> {
        Stock(RefCell::new(Vec::new()))
    }
}

// === impl SlotTx ===

impl<T: Stocked> SlotTx<T> {
    /// Offers the value to the receiver's hook, if it has one; stores what
    /// the hook did not take and wakes the receiver. Dropped silently when
    /// the receiver is gone.
    pub fn send(self, value: T) {
        let mut state = self.0.borrow_mut();
        let hook = match &mut *state {
            State::Waiting { hook: None, waker } => {
                // Most replies: no hook, one look at the slot.
                let waker = waker.take();
                *state = State::Filled(value);
                drop(state);
                if let Some(waker) = waker {
                    waker.wake();
                }
                return;
            }
            State::Waiting { hook, .. } => hook.take(),
            _ => None,
        };
        drop(state);
        self.offer(hook, value);
    }

    /// Offers the value to `hook` (called with the slot not borrowed: the
    /// hook may drop the receiver), then stores what it did not take.
    #[cold]
    fn offer(&self, hook: Option<Weak<dyn Hook<T>>>, value: T) {
        let value = match hook.as_ref().and_then(Weak::upgrade) {
            Some(hook) => match hook.offer(value) {
                Some(value) => value,
                None => {
                    // Taken: nobody is to be woken for it.
                    *self.0.borrow_mut() = State::Taken;
                    return;
                }
            },
            None => value,
        };
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
                State::Waiting { waker, .. } => waker,
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

impl<T: Stocked> Drop for SlotTx<T> {
    fn drop(&mut self) {
        let waker = match &mut *self.0.borrow_mut() {
            State::Waiting { waker, .. } => waker.take(),
            _ => None,
        };
        // Still waiting: the receiver sees `Dropped` when polled again.
        if let Some(waker) = waker {
            waker.wake();
        }
        recycle(&self.0);
    }
}

// === impl SlotRx ===

impl<T: Stocked> SlotRx<T> {
    /// Offers the value to `hook` before this receiver, until
    /// [`SlotRx::unhook`]; nothing if the value is in already.
    pub fn hook(&self, hook: Weak<dyn Hook<T>>) {
        if let State::Waiting { hook: slot, .. } = &mut *self.0.borrow_mut() {
            *slot = Some(hook);
        }
    }

    /// No hook any more: the value comes to this receiver.
    pub fn unhook(&self) {
        if let State::Waiting { hook, .. } = &mut *self.0.borrow_mut() {
            *hook = None;
        }
    }

    /// Puts back a value this receiver took: the next poll returns it
    /// again, at once.
    pub fn put_back(&self, value: T) {
        *self.0.borrow_mut() = State::Filled(value);
    }
}

impl<T: Stocked> Drop for SlotRx<T> {
    fn drop(&mut self) {
        recycle(&self.0);
    }
}

impl<T: Stocked> Future for SlotRx<T> {
    type Output = Result<T, Dropped>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let sender_gone = Rc::strong_count(&self.0) == 1;
        let mut state = self.0.borrow_mut();
        match &mut *state {
            State::Waiting { .. } if sender_gone => {
                *state = State::Taken;
                Poll::Ready(Err(Dropped))
            }
            State::Waiting { waker, .. } => {
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

    thread_local! {
        static NUMBERS: Stock<u32> = const { Stock::new() };
        static WORDS: Stock<&'static str> = const { Stock::new() };
    }

    impl Stocked for u32 {
        fn stock() -> &'static LocalKey<Stock<u32>> {
            &NUMBERS
        }
    }

    impl Stocked for &'static str {
        fn stock() -> &'static LocalKey<Stock<&'static str>> {
            &WORDS
        }
    }

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn poll<T: Stocked>(rx: &mut SlotRx<T>, waker: &Waker) -> Poll<Result<T, Dropped>> {
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
    fn a_value_put_back_is_taken_again_even_after_the_sender_is_gone() {
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let (tx, mut rx) = slot::<u32>();
        tx.send(3);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(3)));
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Err(Dropped)));
        rx.put_back(3);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(3)));
    }

    #[test]
    fn the_sender_sees_a_dropped_receiver() {
        let (tx, rx) = slot::<u32>();
        assert!(!tx.is_closed());
        drop(rx);
        assert!(tx.is_closed());
        tx.send(1); // dropped silently
    }

    /// Takes even numbers; gives odd ones back changed.
    struct Evens(std::cell::Cell<u32>);

    impl Hook<u32> for Evens {
        fn offer(&self, value: u32) -> Option<u32> {
            if value % 2 == 0 {
                self.0.set(value);
                None
            } else {
                Some(value + 100)
            }
        }
    }

    #[test]
    fn a_hook_that_takes_the_value_leaves_the_receiver_asleep() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let hook = Rc::new(Evens(std::cell::Cell::new(0)));
        let (tx, mut rx) = slot::<u32>();
        assert!(poll(&mut rx, &waker).is_pending());
        rx.hook(Rc::downgrade(&hook) as Weak<dyn Hook<u32>>);
        tx.send(4);
        assert_eq!(hook.0.get(), 4);
        assert_eq!(count.0.load(Ordering::Relaxed), 0, "not woken");
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Err(Dropped)));
    }

    #[test]
    fn a_value_the_hook_gives_back_goes_to_the_receiver() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let hook = Rc::new(Evens(std::cell::Cell::new(0)));
        let (tx, mut rx) = slot::<u32>();
        assert!(poll(&mut rx, &waker).is_pending());
        rx.hook(Rc::downgrade(&hook) as Weak<dyn Hook<u32>>);
        tx.send(5);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(105)));
        // Unhooked, or the hook gone: the value comes as it is.
        let (tx, mut rx) = slot::<u32>();
        rx.hook(Rc::downgrade(&hook) as Weak<dyn Hook<u32>>);
        rx.unhook();
        tx.send(6);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(6)));
        let (tx, mut rx) = slot::<u32>();
        rx.hook(Rc::downgrade(&hook) as Weak<dyn Hook<u32>>);
        drop(hook);
        tx.send(8);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(8)));
    }

    #[test]
    fn a_slot_whose_ends_are_gone_is_reused_empty() {
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let stocked = || NUMBERS.with(|s| s.0.borrow().len());
        let before = stocked();
        let (tx, rx) = slot::<u32>();
        tx.send(5); // never taken
        assert_eq!(stocked(), before);
        drop(rx);
        assert_eq!(stocked(), before + 1, "the last end gives it back");
        let (tx, mut rx) = slot::<u32>();
        assert_eq!(stocked(), before);
        assert!(poll(&mut rx, &waker).is_pending(), "the old value is gone");
        assert!(!tx.is_closed());
        tx.send(6);
        assert_eq!(poll(&mut rx, &waker), Poll::Ready(Ok(6)));
    }
}
