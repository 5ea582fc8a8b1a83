use super::*;

const COOLDOWN: Duration = Duration::from_secs(30);

fn open_breaker(t0: Instant) -> Breaker {
    let mut b = Breaker::new(3, COOLDOWN);
    assert_eq!(b.failure(t0), Change::None);
    assert_eq!(b.failure(t0), Change::None);
    assert_eq!(b.failure(t0), Change::Opened);
    b
}

#[test]
fn it_opens_after_the_configured_consecutive_failures_only() {
    let t0 = Instant::now();
    let mut b = Breaker::new(3, COOLDOWN);
    b.failure(t0);
    b.failure(t0);
    // A success in between starts the count again.
    assert_eq!(b.success(), Change::None);
    b.failure(t0);
    b.failure(t0);
    assert_eq!(b.admit(t0), Admit::Go);
    assert!(!b.is_open());
    assert_eq!(b.failure(t0), Change::Opened);
    assert!(b.is_open());
    assert_eq!(b.admit(t0), Admit::Wait(Some(t0 + COOLDOWN)));
}

#[test]
fn after_the_cooldown_one_trial_goes_and_the_rest_wait_for_it() {
    let t0 = Instant::now();
    let mut b = open_breaker(t0);
    assert_eq!(
        b.admit(t0 + COOLDOWN - Duration::from_millis(1)),
        Admit::Wait(Some(t0 + COOLDOWN))
    );
    let t1 = t0 + COOLDOWN;
    assert_eq!(b.admit(t1), Admit::Trial);
    assert_eq!(b.admit(t1), Admit::Wait(None));
    assert!(b.is_open());
    assert_eq!(b.success(), Change::Closed);
    assert!(!b.is_open());
    assert_eq!(b.admit(t1), Admit::Go);
}

#[test]
fn a_failed_trial_opens_it_for_another_cooldown() {
    let t0 = Instant::now();
    let mut b = open_breaker(t0);
    let t1 = t0 + COOLDOWN;
    assert_eq!(b.admit(t1), Admit::Trial);
    assert_eq!(b.failure(t1), Change::Opened);
    assert_eq!(b.admit(t1 + COOLDOWN / 2), Admit::Wait(Some(t1 + COOLDOWN)));
    assert_eq!(b.admit(t1 + COOLDOWN), Admit::Trial);
}

#[test]
fn a_throttled_trial_hands_its_place_to_the_next_caller() {
    let t0 = Instant::now();
    let mut b = open_breaker(t0);
    let t1 = t0 + COOLDOWN;
    assert_eq!(b.admit(t1), Admit::Trial);
    b.neutral();
    assert_eq!(b.admit(t1), Admit::Trial);
    assert_eq!(b.admit(t1), Admit::Wait(None));
    // Neutral verdicts leave a closed or open breaker alone.
    let mut closed = Breaker::new(1, COOLDOWN);
    closed.neutral();
    assert_eq!(closed.admit(t0), Admit::Go);
    let mut open = open_breaker(t0);
    open.neutral();
    assert_eq!(open.admit(t0), Admit::Wait(Some(t0 + COOLDOWN)));
}

#[test]
fn late_failures_of_calls_admitted_before_it_opened_do_not_extend_it() {
    let t0 = Instant::now();
    let mut b = open_breaker(t0);
    assert_eq!(b.failure(t0 + Duration::from_secs(10)), Change::None);
    assert_eq!(b.admit(t0 + COOLDOWN), Admit::Trial);
}

#[test]
fn a_threshold_of_zero_is_one() {
    let t0 = Instant::now();
    let mut b = Breaker::new(0, COOLDOWN);
    assert_eq!(b.admit(t0), Admit::Go);
    assert_eq!(b.failure(t0), Change::Opened);
}
