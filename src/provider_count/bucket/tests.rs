use super::*;

const MS: Duration = Duration::from_millis(1);

/// Takes calls at `now` until refused; how many went.
fn drain(b: &mut Bucket, now: Instant) -> usize {
    let mut n = 0;
    while b.take(now).is_ok() {
        n += 1;
        assert!(n < 10_000, "the bucket never ran dry");
    }
    n
}

#[test]
fn a_burst_of_one_paces_calls_evenly() {
    let t0 = Instant::now();
    let mut b = Bucket::new(600, 1, t0);
    assert_eq!(b.take(t0), Ok(()));
    assert_eq!(b.take(t0), Err(100 * MS));
    assert_eq!(b.take(t0 + 99 * MS), Err(MS));
    assert_eq!(b.take(t0 + 100 * MS), Ok(()));
    assert_eq!(b.take(t0 + 100 * MS), Err(100 * MS));
}

#[test]
fn any_second_holds_at_most_the_rate_plus_one() {
    // A caller that asks every millisecond for five seconds.
    let t0 = Instant::now();
    let mut b = Bucket::new(600, 1, t0);
    let mut at = Vec::new();
    for ms in 0..5000 {
        let now = t0 + ms * MS;
        if b.take(now).is_ok() {
            at.push(ms);
        }
    }
    assert_eq!(at.len(), 50);
    for (i, &start) in at.iter().enumerate() {
        let in_window = at[i..].iter().take_while(|&&t| t < start + 1000).count();
        assert!(in_window <= 11, "{in_window} calls in the second from {start} ms");
    }
}

#[test]
fn the_burst_is_at_most_one_second_worth_and_at_least_one() {
    let t0 = Instant::now();
    assert_eq!(drain(&mut Bucket::new(600, 5, t0), t0), 5);
    assert_eq!(
        drain(&mut Bucket::new(600, 1000, t0), t0),
        10,
        "clamped to 1 s worth"
    );
    assert_eq!(drain(&mut Bucket::new(600, 0, t0), t0), 1, "at least one");
    // Under one call a second, a burst of one; the rate is one a minute.
    let mut slow = Bucket::new(1, 7, t0);
    assert_eq!(drain(&mut slow, t0), 1);
    assert_eq!(slow.take(t0), Err(Duration::from_secs(60)));
    // Zero calls a minute is one.
    assert_eq!(drain(&mut Bucket::new(0, 1, t0), t0), 1);
}

#[test]
fn refill_is_continuous_and_caps_at_the_burst() {
    let t0 = Instant::now();
    let mut b = Bucket::new(600, 5, t0);
    assert_eq!(drain(&mut b, t0), 5);
    // 250 ms refill two and a half calls: two go.
    assert_eq!(drain(&mut b, t0 + 250 * MS), 2);
    // An hour idle refills the burst, no more.
    assert_eq!(drain(&mut b, t0 + Duration::from_secs(3600)), 5);
}

#[test]
fn a_pause_holds_every_call_until_it_ends_then_resumes_without_a_burst() {
    let t0 = Instant::now();
    let mut b = Bucket::new(600, 5, t0);
    b.pause_until(t0 + Duration::from_secs(2));
    assert_eq!(b.take(t0), Err(Duration::from_secs(2)));
    assert_eq!(b.take(t0 + 1999 * MS), Err(MS));
    assert_eq!(b.take(t0 + Duration::from_secs(2)), Ok(()));
    assert_eq!(b.take(t0 + Duration::from_secs(2)), Err(100 * MS));
    // A pause that ends before the next allowed call changes nothing.
    let mut c = Bucket::new(60, 1, t0);
    assert_eq!(c.take(t0), Ok(()));
    c.pause_until(t0 + 10 * MS);
    assert_eq!(c.take(t0 + 10 * MS), Err(990 * MS));
}
