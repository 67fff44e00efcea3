//! [`LeafFirst`]: a stack's entries, read leaf first, stored root first.
//!
//! Everything that reads a thread's stack (walks, reports, ground truth) reads it from the
//! leaf, as `DoStackSnapshot` reports frames; everything that edits it (a call, a return, a
//! pushed Frame) edits it at the leaf. Storing the entries root first makes those edits cost
//! what they touch, not the depth of the stack, and keeps each entry's *depth* (its position
//! from the root) fixed while the stack above it changes, so that what was computed from the
//! rootward part of a stack stays valid across a push or a pop.
//!
//! A [`LeafFirst`] also remembers how much of its root is untouched since its last
//! [`LeafFirst::mark_untouched`]: the layout of a thread's stack re-lays only the part above
//! it.

use std::fmt;
use std::ops::{Index, IndexMut};

/// A sequence indexed leaf first (index 0 is the leaf, the most recent entry) and stored root
/// first. Index `i` and depth `len - 1 - i` name the same entry.
///
/// A clone counts as wholly touched, so that a clone put back in place of the sequence it was
/// taken from never claims an untouched root the layout since then no longer shows. Two
/// sequences are equal when their entries are.
pub struct LeafFirst<T> {
    /// The entries, root first.
    root_first: Vec<T>,
    /// How many entries from the root no edit has touched since [`LeafFirst::mark_untouched`].
    untouched: usize,
}

impl<T> LeafFirst<T> {
    /// An empty sequence.
    pub fn new() -> Self {
        LeafFirst {
            root_first: Vec::new(),
            untouched: 0,
        }
    }

    /// The entries root first, as stored.
    pub fn root_first(&self) -> &[T] {
        &self.root_first
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.root_first.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.root_first.is_empty()
    }

    /// The depth (position from the root) of the entry at leaf-first `index`.
    pub fn depth_of(&self, index: usize) -> usize {
        self.len() - 1 - index
    }

    /// The leaf-first index of the entry at `depth`.
    pub fn index_of(&self, depth: usize) -> usize {
        self.len() - 1 - depth
    }

    /// The entry at leaf-first `index`.
    pub fn get(&self, index: usize) -> Option<&T> {
        let depth = self.len().checked_sub(index + 1)?;
        self.root_first.get(depth)
    }

    /// The leaf (most recent) entry.
    pub fn first(&self) -> Option<&T> {
        self.root_first.last()
    }

    /// The leaf entry, to change.
    pub fn first_mut(&mut self) -> Option<&mut T> {
        let depth = self.len().checked_sub(1)?;
        self.touch(depth);
        self.root_first.last_mut()
    }

    /// The root (oldest) entry.
    pub fn last(&self) -> Option<&T> {
        self.root_first.first()
    }

    /// The entries, leaf first.
    pub fn iter(&self) -> std::iter::Rev<std::slice::Iter<'_, T>> {
        self.root_first.iter().rev()
    }

    /// The entries, leaf first, to change (all count as touched).
    pub fn iter_mut(&mut self) -> std::iter::Rev<std::slice::IterMut<'_, T>> {
        self.untouched = 0;
        self.root_first.iter_mut().rev()
    }

    /// Pushes `entry` as the new leaf.
    pub fn push_leaf(&mut self, entry: T) {
        self.root_first.push(entry);
    }

    /// Pushes `entries`, given leaf first, above the current leaf: the first becomes the leaf.
    pub fn push_leaves(&mut self, entries: impl IntoIterator<Item = T>) {
        let from = self.len();
        self.root_first.extend(entries);
        self.root_first[from..].reverse();
    }

    /// Removes the leaf.
    pub fn pop_leaf(&mut self) -> Option<T> {
        let entry = self.root_first.pop();
        self.touch(self.len());
        entry
    }

    /// Removes the `count` leafmost entries (all of them when there are fewer).
    pub fn pop_leaves(&mut self, count: usize) {
        let keep = self.len().saturating_sub(count);
        self.root_first.truncate(keep);
        self.touch(keep);
    }

    /// Keeps the `depth` rootmost entries.
    pub fn truncate_to_depth(&mut self, depth: usize) {
        self.root_first.truncate(depth);
        self.touch(depth.min(self.len()));
    }

    /// How many entries from the root are untouched since the last
    /// [`LeafFirst::mark_untouched`] (0 before the first).
    pub fn untouched(&self) -> usize {
        self.untouched.min(self.len())
    }

    /// Marks every entry untouched.
    pub fn mark_untouched(&mut self) {
        self.untouched = self.len();
    }

    /// Notes an edit at `depth`: it and the entries above it are touched.
    fn touch(&mut self, depth: usize) {
        self.untouched = self.untouched.min(depth);
    }
}

impl<T> Default for LeafFirst<T> {
    fn default() -> Self {
        LeafFirst::new()
    }
}

impl<T: Clone> Clone for LeafFirst<T> {
    fn clone(&self) -> Self {
        LeafFirst {
            root_first: self.root_first.clone(),
            untouched: 0,
        }
    }
}

impl<T: PartialEq> PartialEq for LeafFirst<T> {
    fn eq(&self, other: &Self) -> bool {
        self.root_first == other.root_first
    }
}

impl<T: Eq> Eq for LeafFirst<T> {}

impl<T: Clone> LeafFirst<T> {
    /// The entries leaf first, in a vector.
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().cloned().collect()
    }
}

impl<T> From<Vec<T>> for LeafFirst<T> {
    /// The sequence of `leaf_first`, whose first item is the leaf.
    fn from(mut leaf_first: Vec<T>) -> Self {
        leaf_first.reverse();
        LeafFirst {
            root_first: leaf_first,
            untouched: 0,
        }
    }
}

impl<T> FromIterator<T> for LeafFirst<T> {
    /// The sequence of the items, the first being the leaf.
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        LeafFirst::from(items.into_iter().collect::<Vec<T>>())
    }
}

impl<T> Index<usize> for LeafFirst<T> {
    type Output = T;

    /// The entry at leaf-first `index`.
    fn index(&self, index: usize) -> &T {
        &self.root_first[self.depth_of(index)]
    }
}

impl<T> IndexMut<usize> for LeafFirst<T> {
    /// The entry at leaf-first `index`, to change.
    fn index_mut(&mut self, index: usize) -> &mut T {
        let depth = self.depth_of(index);
        self.touch(depth);
        &mut self.root_first[depth]
    }
}

impl<'a, T> IntoIterator for &'a LeafFirst<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Rev<std::slice::Iter<'a, T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> IntoIterator for LeafFirst<T> {
    type Item = T;
    type IntoIter = std::iter::Rev<std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.root_first.into_iter().rev()
    }
}

impl<T: fmt::Debug> fmt::Debug for LeafFirst<T> {
    /// The entries as a list, leaf first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_leaf_first_and_stores_root_first() {
        let mut s: LeafFirst<u32> = vec![3, 2, 1].into();
        assert_eq!(s.root_first(), [1, 2, 3]);
        assert_eq!((s[0], s.first(), s.last()), (3, Some(&3), Some(&1)));
        s.push_leaf(4);
        s.push_leaves([6, 5]);
        assert_eq!(s.to_vec(), [6, 5, 4, 3, 2, 1]);
        assert_eq!((s.depth_of(0), s.index_of(0)), (5, 5));
        assert_eq!(s.pop_leaf(), Some(6));
        *s.first_mut().unwrap() = 9;
        assert_eq!(s.to_vec(), [9, 4, 3, 2, 1]);
        s.pop_leaves(2);
        assert_eq!(format!("{s:?}"), "[3, 2, 1]");
        assert_eq!(s.get(3), None);
    }

    #[test]
    fn counts_the_untouched_root() {
        let mut s: LeafFirst<u32> = (0..8).collect();
        assert_eq!(s.untouched(), 0, "new: nothing laid yet");
        s.mark_untouched();
        s.push_leaf(9);
        assert_eq!(s.untouched(), 8, "a push leaves the root alone");
        s.pop_leaves(3);
        assert_eq!(s.untouched(), 6);
        s[1] = 7; // depth 4
        assert_eq!(s.untouched(), 4);
        s.first_mut(); // depth 5
        assert_eq!(s.untouched(), 4);
        s.truncate_to_depth(2);
        assert_eq!(s.untouched(), 2);
        s.push_leaf(1);
        s.mark_untouched();
        assert_eq!(
            (s.clone().untouched(), s.untouched()),
            (0, 3),
            "a clone is all touched"
        );
        s.iter_mut().for_each(|_| {});
        assert_eq!(s.untouched(), 0);
    }
}
