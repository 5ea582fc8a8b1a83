use super::*;
use crate::provider_count::PieceKind;

fn piece(generation: &str, n: u8) -> Piece {
    Piece {
        model: "m".into(),
        generation: generation.into(),
        key: [n; 32],
        kind: PieceKind::Turn,
        text: format!("text {n}").into(),
    }
}

fn keys(q: &mut Queue) -> Vec<u8> {
    std::iter::from_fn(|| q.pop()).map(|j| j.piece.key[0]).collect()
}

#[test]
fn a_key_waiting_or_in_flight_is_a_duplicate_and_a_finished_one_is_not() {
    let mut q = Queue::new(8);
    assert_eq!(q.submit(piece("g", 1)), Submitted::Queued);
    assert_eq!(q.submit(piece("g", 1)), Submitted::Duplicate);
    // Another generation is another piece.
    assert_eq!(q.submit(piece("h", 1)), Submitted::Queued);
    let job = q.pop().unwrap();
    assert_eq!((q.len(), q.in_flight()), (1, 1));
    assert_eq!(q.submit(piece("g", 1)), Submitted::Duplicate, "in flight");
    q.finish(&job.piece);
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.submit(piece("g", 1)), Submitted::Queued);
}

#[test]
fn a_full_queue_drops_its_oldest_and_forgets_its_key() {
    let mut q = Queue::new(3);
    for n in 1..=3 {
        assert_eq!(q.submit(piece("g", n)), Submitted::Queued);
    }
    assert_eq!(q.submit(piece("g", 4)), Submitted::DroppedOldest);
    assert_eq!(q.len(), 3);
    // The dropped piece may come again (and drops the next oldest).
    assert_eq!(q.submit(piece("g", 1)), Submitted::DroppedOldest);
    assert_eq!(keys(&mut q), [3, 4, 1]);
}

#[test]
fn a_requeued_job_goes_to_the_back_marked_and_keeps_its_key() {
    let mut q = Queue::new(2);
    q.submit(piece("g", 1));
    q.submit(piece("g", 2));
    let job = q.pop().unwrap();
    assert!(!job.retried);
    q.submit(piece("g", 3));
    // Full again: the requeue drops the oldest waiting piece (2).
    assert!(q.requeue(job));
    assert_eq!(q.in_flight(), 0);
    assert_eq!(q.submit(piece("g", 1)), Submitted::Duplicate);
    let order: Vec<_> = std::iter::from_fn(|| q.pop())
        .map(|j| (j.piece.key[0], j.retried))
        .collect();
    assert_eq!(order, [(3, false), (1, true)]);
}

#[test]
fn clear_forgets_the_waiting_but_not_the_in_flight() {
    let mut q = Queue::new(4);
    q.submit(piece("g", 1));
    q.submit(piece("g", 2));
    let _flying = q.pop().unwrap();
    q.clear();
    assert_eq!(q.len(), 0);
    assert_eq!(q.submit(piece("g", 1)), Submitted::Duplicate);
    assert_eq!(q.submit(piece("g", 2)), Submitted::Queued);
}

#[test]
fn a_capacity_of_zero_holds_one() {
    let mut q = Queue::new(0);
    assert_eq!(q.submit(piece("g", 1)), Submitted::Queued);
    assert_eq!(q.submit(piece("g", 2)), Submitted::DroppedOldest);
    assert_eq!(keys(&mut q), [2]);
}
