//! Values the process replaces now and then — the slot map, the command
//! table, the live settings — and each worker's copy of them.
//!
//! Every request reads the slot map and the command table. An arc-swap
//! load protects the pointer it hands out with a thread-local debt entry
//! (several atomic operations per load); a worker's [`Local`] copy is
//! checked against a version number instead, one atomic load, and handed
//! out as an `Rc`, whose count is not atomic. A store bumps the version
//! after the new value is in place, so a worker that sees the new version
//! takes the new value (or a newer one).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::{ArcSwap, Guard};

/// A value every worker reads and a few places replace.
pub struct Swapped<T> {
    value: ArcSwap<T>,
    version: AtomicU64,
}

impl<T> Swapped<T> {
    pub fn from_pointee(value: T) -> Swapped<T> {
        Swapped {
            value: ArcSwap::from_pointee(value),
            version: AtomicU64::new(0),
        }
    }

    /// The current value, for a reader that is not on a worker's hot path.
    pub fn load(&self) -> Guard<Arc<T>> {
        self.value.load()
    }

    pub fn load_full(&self) -> Arc<T> {
        self.value.load_full()
    }

    pub fn store(&self, value: Arc<T>) {
        self.value.store(value);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Replaces the value with one made from the current one.
    pub fn rcu<R, F>(&self, f: F)
    where
        F: FnMut(&Arc<T>) -> R,
        R: Into<Arc<T>>,
    {
        self.value.rcu(f);
        self.version.fetch_add(1, Ordering::Release);
    }
}

/// One worker's copy of a [`Swapped`] value.
pub struct Local<T> {
    version: Cell<u64>,
    value: RefCell<Held<T>>,
}

/// A worker's handle to a value it read from a [`Swapped`]: an `Rc` around
/// the shared `Arc`, so that handing it out on every request counts
/// without atomic operations (the `Rc` is made once per store, not per
/// use).
pub struct Held<T>(
    #[allow(clippy::redundant_allocation)] // the point: see above
    Rc<Arc<T>>,
);

impl<T> Clone for Held<T> {
    fn clone(&self) -> Held<T> {
        Held(Rc::clone(&self.0))
    }
}

impl<T> std::ops::Deref for Held<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> Local<T> {
    pub fn new(of: &Swapped<T>) -> Local<T> {
        let version = of.version.load(Ordering::Acquire);
        Local {
            version: Cell::new(version),
            value: RefCell::new(Held(Rc::new(of.load_full()))),
        }
    }

    /// The current value of `of` (which must be the `Swapped` this copy
    /// was made from).
    pub fn get(&self, of: &Swapped<T>) -> Held<T> {
        let version = of.version.load(Ordering::Acquire);
        if version != self.version.get() {
            match self.value.try_borrow_mut() {
                Ok(mut value) => *value = Held(Rc::new(of.load_full())),
                // Read inside a `with` of this copy: the new value, this
                // once, straight from `of`.
                Err(_) => return Held(Rc::new(of.load_full())),
            }
            self.version.set(version);
        }
        self.value.borrow().clone()
    }

    /// `f` of the current value of `of`, without a handle to keep (no
    /// count taken and given back).
    #[inline]
    pub fn with<R>(&self, of: &Swapped<T>, f: impl FnOnce(&T) -> R) -> R {
        let version = of.version.load(Ordering::Acquire);
        if version != self.version.get() {
            match self.value.try_borrow_mut() {
                Ok(mut value) => *value = Held(Rc::new(of.load_full())),
                // Read again inside an `f` of its own: the new value,
                // this once, straight from `of`.
                Err(_) => return f(&of.load_full()),
            }
            self.version.set(version);
        }
        f(&self.value.borrow())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_follows_every_store() {
        let shared = Swapped::from_pointee(1);
        let local = Local::new(&shared);
        assert_eq!(*local.get(&shared), 1);
        shared.store(Arc::new(2));
        assert_eq!(*local.get(&shared), 2);
        shared.rcu(|n| **n + 1);
        assert_eq!(*local.get(&shared), 3);
        assert_eq!(local.with(&shared, |n| *n), 3);
        let held = local.get(&shared);
        shared.store(Arc::new(4));
        assert_eq!(local.with(&shared, |n| *n), 4);
        assert_eq!(*local.get(&shared), 4);
        assert_eq!(*held, 3, "a value handed out stays as it was");
    }
}
