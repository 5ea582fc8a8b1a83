//! The bounded queue of pieces waiting for a call, and the dedup set that
//! keeps a (generation, key) from being queued twice while it waits or is in
//! flight. Full, it drops its oldest piece to take the new one: a piece
//! waiting longest is the likeliest to belong to a conversation that has
//! moved on. A pure structure; the counter holds it under its lock.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use super::{Piece, Submitted};

/// A piece on its way, and whether it has been requeued after a 429.
#[derive(Debug, Clone)]
pub struct Job {
    /// The piece.
    pub piece: Piece,
    /// Requeued once already: a second 429 gives it up.
    pub retried: bool,
}

/// What makes two pieces the same piece.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    generation: Arc<str>,
    key: [u8; 32],
}

impl Key {
    fn of(piece: &Piece) -> Key {
        Key {
            generation: piece.generation.clone(),
            key: piece.key,
        }
    }
}

/// Waiting pieces (oldest first) and the keys of every piece waiting or in
/// flight.
#[derive(Debug)]
pub struct Queue {
    capacity: usize,
    waiting: VecDeque<Job>,
    known: HashSet<Key>,
    in_flight: usize,
}

impl Queue {
    /// An empty queue holding at most `capacity` pieces (at least 1).
    pub fn new(capacity: usize) -> Queue {
        Queue {
            capacity: capacity.max(1),
            waiting: VecDeque::new(),
            known: HashSet::new(),
            in_flight: 0,
        }
    }

    /// Queues `piece` unless its key is waiting or in flight.
    pub fn submit(&mut self, piece: Piece) -> Submitted {
        if !self.known.insert(Key::of(&piece)) {
            return Submitted::Duplicate;
        }
        let dropped = self.make_room();
        self.waiting.push_back(Job {
            piece,
            retried: false,
        });
        if dropped {
            Submitted::DroppedOldest
        } else {
            Submitted::Queued
        }
    }

    /// The oldest waiting piece, now in flight (its key stays known until
    /// [`Queue::finish`]).
    pub fn pop(&mut self) -> Option<Job> {
        let job = self.waiting.pop_front()?;
        self.in_flight += 1;
        Some(job)
    }

    /// Puts an in-flight job back at the end of the queue, marked retried.
    /// Returns whether the oldest waiting piece was dropped to make room.
    pub fn requeue(&mut self, mut job: Job) -> bool {
        self.in_flight = self.in_flight.saturating_sub(1);
        job.retried = true;
        let dropped = self.make_room();
        self.waiting.push_back(job);
        dropped
    }

    /// An in-flight piece is done: its key may be queued again.
    pub fn finish(&mut self, piece: &Piece) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.known.remove(&Key::of(piece));
    }

    /// Forgets every waiting piece (on close); in-flight ones stay known.
    pub fn clear(&mut self) {
        for job in self.waiting.drain(..) {
            self.known.remove(&Key::of(&job.piece));
        }
    }

    /// Pieces waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Pieces in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Drops the oldest waiting piece if the queue is full.
    fn make_room(&mut self) -> bool {
        if self.waiting.len() < self.capacity {
            return false;
        }
        match self.waiting.pop_front() {
            Some(old) => {
                self.known.remove(&Key::of(&old.piece));
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;
