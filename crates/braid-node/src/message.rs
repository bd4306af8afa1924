//! Messages: a header and a body that is raw bytes or a typed value
//! (serde, encoded with postcard only when it leaves the process).

use std::any::Any;
use std::fmt;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::Header;

/// A message type: a serde value with a stable name. The name's hash is
/// the type id on the wire, so both sides must agree on the name (and on
/// the encoding of the fields, postcard's: field order matters).
///
/// ```
/// use braid_node::{MessageType, MessageTypeId};
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Ping { seq: u32 }
/// impl MessageType for Ping { const NAME: &'static str = "example.Ping"; }
/// assert_eq!(Ping::type_id(), MessageTypeId::of_name("example.Ping"));
/// ```
pub trait MessageType: Serialize + DeserializeOwned + Send + 'static {
    /// Stable, unique name (a reverse domain or crate path is a good
    /// habit).
    const NAME: &'static str;

    /// The id derived from [`MessageType::NAME`].
    fn type_id() -> MessageTypeId {
        MessageTypeId::of_name(Self::NAME)
    }
}

/// The wire id of a message type: the 64-bit FNV-1a hash of its name.
/// Collisions are detected when types are registered in a
/// [`crate::Dispatcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageTypeId(pub u64);

impl MessageTypeId {
    /// The id of the type named `name`.
    pub const fn of_name(name: &str) -> MessageTypeId {
        let bytes = name.as_bytes();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut i = 0;
        while i < bytes.len() {
            h ^= bytes[i] as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            i += 1;
        }
        MessageTypeId(h)
    }
}

impl fmt::Display for MessageTypeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

type EncodeFn = fn(&(dyn Any + Send)) -> Result<Vec<u8>, postcard::Error>;

/// A typed value that has not been serialized (and will not be if it
/// stays in the process).
pub(crate) struct LocalValue {
    type_id: MessageTypeId,
    name: &'static str,
    value: Box<dyn Any + Send>,
    encode: EncodeFn,
}

fn encode_value<T: MessageType>(v: &(dyn Any + Send)) -> Result<Vec<u8>, postcard::Error> {
    match v.downcast_ref::<T>() {
        Some(v) => postcard::to_allocvec(v),
        // Unreachable by construction: the function is stored next to a
        // `Box<T>`. An error keeps that assumption from becoming a panic.
        None => Err(postcard::Error::SerializeBufferFull),
    }
}

pub(crate) enum Body {
    Raw(Bytes),
    Local(LocalValue),
    Encoded { type_id: MessageTypeId, bytes: Bytes },
}

/// What a message body holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// Application bytes, not interpreted.
    Raw,
    /// A value of the message type with this id.
    Typed(MessageTypeId),
}

/// Decoding a typed body failed.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body holds another type (or raw bytes).
    #[error("message body is {found:?}, not `{expected}` ({expected_id})")]
    WrongType {
        /// The type asked for.
        expected: &'static str,
        /// Its id.
        expected_id: MessageTypeId,
        /// What the body holds.
        found: BodyKind,
    },
    /// The bytes are not a valid postcard encoding of the type.
    #[error("cannot decode `{name}`: {source}")]
    Postcard {
        /// The type asked for.
        name: &'static str,
        /// What postcard said.
        source: postcard::Error,
    },
}

/// A message: a header `H` and a body.
///
/// Typed bodies stay unserialized while the message stays in the process
/// (between virtual nodes of one host); they are encoded with postcard
/// when the message goes on the wire, and decoded by
/// [`Message::decode`] (or a [`crate::Dispatcher`]) on the receiver.
///
/// ```
/// use braid_node::{BasicAddress, BasicHeader, Message, MessageType, Transport};
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct Hello { text: String }
/// impl MessageType for Hello { const NAME: &'static str = "doc.Hello"; }
///
/// let a = BasicAddress::new("127.0.0.1:7000".parse().unwrap());
/// let h = BasicHeader::new(a, a, Transport::Tcp);
/// let m = Message::typed(h, Hello { text: "hi".into() });
/// assert!(m.is::<Hello>());
/// let (_, hello) = m.decode::<Hello>().unwrap();
/// assert_eq!(hello.text, "hi");
/// ```
pub struct Message<H> {
    header: H,
    pub(crate) body: Body,
}

impl<H: Header> Message<H> {
    /// A message with raw bytes.
    pub fn raw(header: H, bytes: impl Into<Bytes>) -> Self {
        Message { header, body: Body::Raw(bytes.into()) }
    }

    /// A message carrying `value`.
    pub fn typed<T: MessageType>(header: H, value: T) -> Self {
        Message {
            header,
            body: Body::Local(LocalValue {
                type_id: T::type_id(),
                name: T::NAME,
                value: Box::new(value),
                encode: encode_value::<T>,
            }),
        }
    }

    pub(crate) fn from_wire(header: H, body: Body) -> Self {
        Message { header, body }
    }

    /// The header.
    pub fn header(&self) -> &H {
        &self.header
    }

    /// The header, to change (to forward the message, or set its
    /// transport).
    pub fn header_mut(&mut self) -> &mut H {
        &mut self.header
    }

    /// What the body holds.
    pub fn kind(&self) -> BodyKind {
        match &self.body {
            Body::Raw(_) => BodyKind::Raw,
            Body::Local(v) => BodyKind::Typed(v.type_id),
            Body::Encoded { type_id, .. } => BodyKind::Typed(*type_id),
        }
    }

    /// Whether the body is a `T`.
    pub fn is<T: MessageType>(&self) -> bool {
        self.kind() == BodyKind::Typed(T::type_id())
    }

    /// Whether a typed body is still the sender's value, never serialized
    /// (true for messages delivered between virtual nodes of one host).
    pub fn is_unserialized(&self) -> bool {
        matches!(self.body, Body::Local(_))
    }

    /// The bytes of a raw body.
    pub fn raw_bytes(&self) -> Option<&Bytes> {
        match &self.body {
            Body::Raw(b) => Some(b),
            _ => None,
        }
    }

    /// Header and raw bytes; `Err(self)` if the body is typed.
    pub fn into_raw(self) -> Result<(H, Bytes), Self> {
        match self.body {
            Body::Raw(b) => Ok((self.header, b)),
            body => Err(Message { header: self.header, body }),
        }
    }

    /// Header and the `T` in the body: the value itself if it was never
    /// serialized, else decoded from postcard.
    pub fn decode<T: MessageType>(self) -> Result<(H, T), DecodeError> {
        let found = self.kind();
        let wrong = || DecodeError::WrongType { expected: T::NAME, expected_id: T::type_id(), found };
        match self.body {
            Body::Local(v) if v.type_id == T::type_id() => match v.value.downcast::<T>() {
                Ok(b) => Ok((self.header, *b)),
                Err(_) => Err(wrong()),
            },
            Body::Encoded { type_id, bytes } if type_id == T::type_id() => postcard::from_bytes(&bytes)
                .map(|v| (self.header, v))
                .map_err(|source| DecodeError::Postcard { name: T::NAME, source }),
            _ => Err(wrong()),
        }
    }

    /// Encode a typed body now (if it is still a value); the body's
    /// length on the wire.
    pub(crate) fn encode_body(&mut self) -> Result<usize, crate::SendError> {
        if let Body::Local(v) = &self.body {
            let bytes = (v.encode)(v.value.as_ref())
                .map_err(|e| crate::SendError::Encode { what: v.name, reason: e.to_string() })?;
            self.body = Body::Encoded { type_id: v.type_id, bytes: Bytes::from(bytes) };
        }
        Ok(match &self.body {
            Body::Raw(b) | Body::Encoded { bytes: b, .. } => b.len(),
            Body::Local(_) => 0,
        })
    }

    /// Header and the body as it goes on the wire (encoding a typed
    /// value).
    pub(crate) fn into_wire_parts(self) -> Result<(H, BodyKind, Bytes), crate::SendError> {
        match self.body {
            Body::Raw(b) => Ok((self.header, BodyKind::Raw, b)),
            Body::Encoded { type_id, bytes } => Ok((self.header, BodyKind::Typed(type_id), bytes)),
            Body::Local(v) => {
                let bytes = (v.encode)(v.value.as_ref())
                    .map_err(|e| crate::SendError::Encode { what: v.name, reason: e.to_string() })?;
                Ok((self.header, BodyKind::Typed(v.type_id), Bytes::from(bytes)))
            }
        }
    }
}

impl<H: fmt::Debug> fmt::Debug for Message<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = match &self.body {
            Body::Raw(b) => format!("raw({} bytes)", b.len()),
            Body::Local(v) => format!("{} (unserialized)", v.name),
            Body::Encoded { type_id, bytes } => format!("{type_id} ({} bytes)", bytes.len()),
        };
        f.debug_struct("Message").field("header", &self.header).field("body", &body).finish()
    }
}
