//! The gate's receive buffer: a body's bytes between arriving and being
//! passed on as whole messages.

use bytes::{Bytes, BytesMut};

use super::FRAME_HEADER_BYTES;

/// Whether `bytes` starts with a whole gRPC message (header and payload).
fn starts_with_message(bytes: &[u8]) -> bool {
    match bytes.first_chunk::<FRAME_HEADER_BYTES>() {
        Some(&[_, a, b, c, d]) => {
            bytes.len() - FRAME_HEADER_BYTES >= u32::from_be_bytes([a, b, c, d]) as usize
        }
        None => false,
    }
}

/// Bytes of a body received and not yet passed on. A message that arrives
/// whole in one frame (the usual case for messages up to the frame size) is
/// passed on as a slice of that frame, not copied; bytes of a message still
/// arriving are copied together. A frame is held as a slice only while a
/// whole message is at its front: once the messages before a partial one
/// are taken (a stream's handler asks for each in turn), the partial one is
/// copied out, so an upload that stalls holds the bytes it sent, not the
/// connection's read buffer. A whole message held as a slice keeps the read
/// buffer's allocation it came from until it is taken (for a unary call, at
/// once; tonic copies it into its decode buffer).
#[derive(Default)]
pub(super) struct Received {
    /// The rest of a frame that starts with a whole message (or empty).
    frame: Bytes,
    /// Bytes copied together (empty while `frame` is not).
    joined: BytesMut,
}

impl Received {
    /// Adds a frame's data.
    pub(super) fn push(&mut self, data: Bytes) {
        if self.frame.is_empty() && self.joined.is_empty() && starts_with_message(&data) {
            self.frame = data;
        } else {
            self.joined.extend_from_slice(&self.frame);
            self.frame = Bytes::new();
            self.joined.extend_from_slice(&data);
        }
    }

    /// The bytes received, in order.
    pub(super) fn bytes(&self) -> &[u8] {
        if self.frame.is_empty() {
            &self.joined
        } else {
            &self.frame
        }
    }

    pub(super) fn len(&self) -> usize {
        self.bytes().len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room for `whole` bytes, when they are not all here: they will be
    /// copied together.
    pub(super) fn reserve(&mut self, whole: usize) {
        if self.len() < whole {
            self.joined.reserve(whole.saturating_sub(self.joined.len()));
        }
    }

    /// The first `n` bytes (at most [`Received::len`]), passed on.
    pub(super) fn take(&mut self, n: usize) -> Bytes {
        if self.frame.is_empty() {
            return self.joined.split_to(n).freeze();
        }
        let taken = self.frame.split_to(n);
        if !starts_with_message(&self.frame) {
            // The start of a message still arriving: copied (see above).
            self.joined.extend_from_slice(&self.frame);
            self.frame = Bytes::new();
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gRPC message of `n` payload bytes of `fill`.
    fn message(n: u32, fill: u8) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&n.to_be_bytes());
        m.extend(std::iter::repeat_n(fill, n as usize));
        m
    }

    /// Whether `part` lies inside `whole`'s memory (a slice, not a copy).
    fn within(part: &Bytes, whole: &Bytes) -> bool {
        let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
        p >= w && p + part.len() <= w + whole.len()
    }

    #[test]
    fn a_message_whole_in_its_frame_is_passed_on_uncopied() {
        let (a, b) = (message(300, 1), message(20, 2));
        let frame = Bytes::from([a.clone(), b.clone()].concat());
        let mut r = Received::default();
        r.push(frame.clone());
        r.reserve(a.len());
        let first = r.take(a.len());
        let second = r.take(b.len());
        assert_eq!((&first[..], &second[..]), (&a[..], &b[..]));
        assert!(within(&first, &frame) && within(&second, &frame));
        assert!(
            r.is_empty() && r.joined.capacity() == 0,
            "nothing was copied or reserved"
        );
    }

    #[test]
    fn a_message_still_arriving_is_copied_and_never_holds_its_frame() {
        let (a, b) = (message(300, 1), message(4_000, 2));
        // The first frame ends inside the second message.
        let cut = a.len() + 100;
        let both = [a.clone(), b.clone()].concat();
        let (one, two) = (
            Bytes::copy_from_slice(&both[..cut]),
            Bytes::copy_from_slice(&both[cut..]),
        );
        let mut r = Received::default();
        r.push(one.clone());
        let first = r.take(a.len());
        assert!(within(&first, &one));
        assert!(
            r.frame.is_empty(),
            "the partial message was copied out of its frame"
        );
        assert_eq!(r.bytes(), &both[a.len()..cut]);
        r.reserve(b.len());
        r.push(two.clone());
        let second = r.take(b.len());
        assert_eq!(&second[..], &b[..]);
        assert!(!within(&second, &one) && !within(&second, &two));
        assert!(r.is_empty());
        // A frame that ends inside the next message's header: the header's
        // bytes are copied out too.
        let mut r = Received::default();
        let frame = Bytes::from([a.clone(), b[..3].to_vec()].concat());
        r.push(frame.clone());
        assert!(within(&r.take(a.len()), &frame));
        assert!(r.frame.is_empty() && r.bytes() == &b[..3]);
        r.push(Bytes::copy_from_slice(&b[3..]));
        assert_eq!(&r.take(b.len())[..], &b[..]);
        // A header split across frames, too.
        let mut r = Received::default();
        r.push(Bytes::copy_from_slice(&a[..3]));
        r.push(Bytes::copy_from_slice(&a[3..]));
        assert_eq!(&r.take(a.len())[..], &a[..]);
    }

    #[test]
    fn empty_messages_and_frames_arriving_behind_a_held_one_keep_their_order() {
        let (empty, b) = (message(0, 0), message(40, 7));
        let frame = Bytes::from([empty.clone(), empty.clone()].concat());
        let mut r = Received::default();
        r.push(frame.clone());
        let first = r.take(empty.len());
        assert_eq!(&first[..], &empty[..]);
        assert!(within(&first, &frame) && !r.frame.is_empty());
        // Not asked for by the gate while a whole message is held, but kept
        // in order if it were.
        r.push(Bytes::from(b.clone()));
        assert!(r.frame.is_empty());
        assert_eq!(r.bytes(), &[empty.clone(), b.clone()].concat()[..]);
        assert_eq!(&r.take(empty.len())[..], &empty[..]);
        assert_eq!(&r.take(b.len())[..], &b[..]);
        assert!(r.is_empty());
    }
}
