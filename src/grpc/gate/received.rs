//! The gate's receive buffer: a body's bytes between arriving and being
//! passed on as whole messages.

use bytes::{Buf as _, Bytes, BytesMut};

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

/// The capacity a message of `whole` bytes is passed on in: tonic, having
/// read its 5-byte header, reserves as much again as the rest.
fn room(whole: usize) -> usize {
    2 * whole
}

/// Bytes of a body received and not yet passed on. A frame is held as a
/// slice (not copied) while a whole message is at its front; bytes of a
/// message still arriving are copied together. Once the messages before a
/// partial one are taken (a stream's handler asks for each in turn), the
/// partial one is copied out, so an upload that stalls holds the bytes it
/// sent, not the connection's read buffer. Each byte of a message is copied
/// once between the connection's read buffer and the decoder: by the gate
/// or by tonic, not both ([`Received::take`]).
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

    /// Room for a message of `whole` bytes, when they are not all here:
    /// they will be copied together. For a body's first message (`own`),
    /// with room for the decoder's reservation too ([`Received::take`]; what
    /// tonic reserves, it would otherwise allocate by growing its own
    /// buffer, a copy). The room past the bytes received is address space,
    /// never written.
    pub(super) fn reserve(&mut self, whole: usize, own: bool) {
        if self.len() < whole {
            let want = if own { room(whole) } else { whole };
            self.joined.reserve(want.saturating_sub(self.joined.len()));
        }
    }

    /// The first `n` bytes (at most [`Received::len`]), passed on. The
    /// first message of a body (`own`) is passed on in a buffer of its own,
    /// so that the decoder behind the gate takes it over instead of copying
    /// it: tonic's decode buffer starts empty ([`super::super::codec`]), and
    /// an empty `BytesMut` adopts the allocation of a `Bytes` put into it
    /// when nothing else shares that allocation. Bytes copied together are
    /// that buffer already (bytes of a next message that came in behind
    /// them, at most a frame, are copied out instead, once a body). A
    /// message whole in its frame is copied once, here, into a buffer with
    /// room for the decoder's reservation (tonic reserves as much again as
    /// the message once it has read its header), where tonic would have
    /// copied it and then grown its buffer by a second copy. Later messages
    /// (a stream's) meet a decode buffer that is no longer empty and is
    /// copied into: they are passed on as slices, copied by tonic alone.
    pub(super) fn take(&mut self, n: usize, own: bool) -> Bytes {
        if self.frame.is_empty() {
            if !own {
                return self.joined.split_to(n).freeze();
            }
            if n < self.joined.len() {
                let rest = BytesMut::from(&self.joined[n..]);
                self.joined.truncate(n);
                return std::mem::replace(&mut self.joined, rest).freeze();
            }
            return std::mem::take(&mut self.joined).freeze();
        }
        let taken = if own {
            let mut buffer = BytesMut::with_capacity(room(n));
            buffer.extend_from_slice(&self.frame[..n]);
            self.frame.advance(n);
            buffer.freeze()
        } else {
            self.frame.split_to(n)
        };
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
    fn a_bodys_first_message_is_copied_into_a_buffer_of_its_own_and_later_ones_are_slices() {
        let (a, b) = (message(300, 1), message(20, 2));
        let frame = Bytes::from([a.clone(), b.clone()].concat());
        let mut r = Received::default();
        r.push(frame.clone());
        r.reserve(a.len(), true);
        let first = r.take(a.len(), true);
        assert!(
            within(&r.frame, &frame),
            "the rest of the frame is held, not copied"
        );
        let second = r.take(b.len(), false);
        assert_eq!((&first[..], &second[..]), (&a[..], &b[..]));
        // Nothing else shares the first: the decoder can take it over. The
        // second goes to a decode buffer that copies it anyway.
        assert!(!within(&first, &frame) && first.is_unique());
        assert!(within(&second, &frame));
        assert!(
            r.is_empty() && r.joined.capacity() == 0,
            "nothing was copied together or reserved"
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
        let first = r.take(a.len(), true);
        assert_eq!(&first[..], &a[..]);
        assert!(
            r.frame.is_empty(),
            "the partial message was copied out of its frame"
        );
        assert_eq!(r.bytes(), &both[a.len()..cut]);
        r.reserve(b.len(), false);
        r.push(two.clone());
        let second = r.take(b.len(), false);
        assert_eq!(&second[..], &b[..]);
        assert!(!within(&second, &one) && !within(&second, &two));
        assert!(r.is_empty());
        // A frame that ends inside the next message's header: the header's
        // bytes are copied out too.
        let mut r = Received::default();
        let frame = Bytes::from([a.clone(), b[..3].to_vec()].concat());
        r.push(frame.clone());
        assert_eq!(&r.take(a.len(), true)[..], &a[..]);
        assert!(r.frame.is_empty() && r.bytes() == &b[..3]);
        r.push(Bytes::copy_from_slice(&b[3..]));
        assert_eq!(&r.take(b.len(), false)[..], &b[..]);
        // A header split across frames, too.
        let mut r = Received::default();
        r.push(Bytes::copy_from_slice(&a[..3]));
        r.push(Bytes::copy_from_slice(&a[3..]));
        assert_eq!(&r.take(a.len(), true)[..], &a[..]);
    }

    #[test]
    fn empty_messages_and_frames_arriving_behind_a_held_one_keep_their_order() {
        let (empty, b) = (message(0, 0), message(40, 7));
        let frame = Bytes::from([empty.clone(), empty.clone()].concat());
        let mut r = Received::default();
        r.push(frame.clone());
        let first = r.take(empty.len(), true);
        assert_eq!(&first[..], &empty[..]);
        assert!(within(&r.frame, &frame));
        // Not asked for by the gate while a whole message is held, but kept
        // in order if it were.
        r.push(Bytes::from(b.clone()));
        assert!(r.frame.is_empty());
        assert_eq!(r.bytes(), &[empty.clone(), b.clone()].concat()[..]);
        assert_eq!(&r.take(empty.len(), false)[..], &empty[..]);
        assert_eq!(&r.take(b.len(), false)[..], &b[..]);
        assert!(r.is_empty());
    }

    /// The bytes behind a body's first message, copied together with it,
    /// are copied out once; the messages among them are then slices of that
    /// one copy, not each a copy of all that follows it (which, for a frame
    /// of many small messages, would copy the frame once per message).
    #[test]
    fn bytes_behind_a_joined_first_message_are_copied_out_once() {
        let a = message(3_000, 1);
        let small: Vec<Vec<u8>> = (0..50).map(|i| message(5, i)).collect();
        let all = [vec![a.clone()], small.clone()].concat().concat();
        let mut r = Received::default();
        r.push(Bytes::copy_from_slice(&all[..10]));
        r.reserve(a.len(), true);
        // The rest of the first message, every small one, and half of one
        // more message's header.
        let tail = message(7, 9);
        r.push(Bytes::from([&all[10..], &tail[..2]].concat()));
        let first = r.take(a.len(), true);
        assert_eq!(&first[..], &a[..]);
        assert!(first.is_unique());
        let taken: Vec<Bytes> = small.iter().map(|m| r.take(m.len(), false)).collect();
        for (t, m) in taken.iter().zip(&small) {
            assert_eq!(&t[..], &m[..]);
        }
        for pair in taken.windows(2) {
            assert_eq!(
                pair[0].as_ptr_range().end,
                pair[1].as_ptr(),
                "each a slice of one copy"
            );
        }
        assert_eq!(r.bytes(), &tail[..2]);
        r.push(Bytes::copy_from_slice(&tail[2..]));
        assert_eq!(&r.take(tail.len(), false)[..], &tail[..]);
        assert!(r.is_empty());
    }

    /// Through the decoder the server builds (tonic's, with this crate's
    /// codec): a message passed on, whole in its frame or copied together
    /// from several, is decoded where the gate put it. The text of a
    /// `CountTokensRequest` lies in the buffer passed on, so neither tonic's
    /// buffer nor its reservation for the message copied it again.
    #[tokio::test]
    async fn the_decoder_takes_over_the_buffer_passed_on() {
        use prost::Message as _;
        use tonic::codec::{Codec as _, Streaming};

        use crate::grpc::codec::TimedCodec;
        use crate::grpc::pb;

        for (text_bytes, frames) in [(300, 1), (40_000, 1), (300_000, 5)] {
            let text = "counted where it landed ".repeat(text_bytes / 24);
            let request = pb::CountTokensRequest {
                tokenizer: None,
                text: text.clone().into(),
            };
            let payload = request.encode_to_vec();
            let mut m = vec![0];
            m.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
            m.extend_from_slice(&payload);
            let mut r = Received::default();
            r.reserve(m.len(), true);
            for part in m.chunks(m.len().div_ceil(frames)) {
                r.push(Bytes::copy_from_slice(part));
            }
            let taken = r.take(m.len(), true);
            let range = taken.as_ptr_range();
            let decoder = TimedCodec::<pb::CountTokensResponse, pb::CountTokensRequest>::default().decoder();
            let mut stream = Streaming::new_request(decoder, http_body_util::Full::new(taken), None, None);
            let got = stream.message().await.unwrap().unwrap();
            assert_eq!(got.text().unwrap(), text);
            let at = got.text.as_ptr_range();
            assert!(
                range.start <= at.start && at.end <= range.end,
                "{text_bytes} bytes in {frames} frames: copied after the gate"
            );
        }
    }
}
