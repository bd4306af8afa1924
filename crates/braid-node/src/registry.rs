//! The message type registry: receivers dispatch on a message's type.

use std::collections::HashMap;

use bytes::Bytes;

use crate::message::{BodyKind, DecodeError};
use crate::{Header, Message, MessageType, MessageTypeId};

type Handler<H, S> = Box<dyn FnMut(&mut S, Message<H>) -> Result<(), DecodeError> + Send>;
type RawHandler<H, S> = Box<dyn FnMut(&mut S, H, Bytes) + Send>;

/// Registering a type failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two names hash to the same id, or one type was registered twice.
    #[error("message type `{name}` has id {id}, already registered for `{existing}`")]
    Duplicate {
        /// The type being registered.
        name: &'static str,
        /// Its id.
        id: MessageTypeId,
        /// The type registered first with this id.
        existing: &'static str,
    },
}

/// Dispatching a message failed.
#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// No handler for the message's type (the id is given; names are only
    /// known for registered types).
    #[error("no handler for message type {0}")]
    UnknownType(MessageTypeId),
    /// A raw message arrived and no raw handler was registered.
    #[error("no handler for raw messages")]
    NoRawHandler,
    /// The body did not decode as the registered type.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Maps message type ids to handlers, with state `S` handed to each.
///
/// ```
/// use braid_node::{BasicAddress, BasicHeader, Dispatcher, Message, MessageType, Transport};
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Ping(u32);
/// impl MessageType for Ping { const NAME: &'static str = "doc.Ping"; }
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Pong(u32);
/// impl MessageType for Pong { const NAME: &'static str = "doc.Pong"; }
///
/// let mut d = Dispatcher::<BasicHeader, Vec<String>>::new();
/// d.on::<Ping>(|log, _h, p| log.push(format!("ping {}", p.0))).unwrap();
/// d.on::<Pong>(|log, _h, p| log.push(format!("pong {}", p.0))).unwrap();
/// let a = BasicAddress::new("127.0.0.1:1".parse().unwrap());
/// let mut log = Vec::new();
/// d.dispatch(&mut log, Message::typed(BasicHeader::new(a, a, Transport::Udp), Pong(7))).unwrap();
/// assert_eq!(log, ["pong 7"]);
/// assert_eq!(d.name_of(<Ping as MessageType>::type_id()), Some("doc.Ping"));
/// ```
pub struct Dispatcher<H, S> {
    handlers: HashMap<MessageTypeId, (&'static str, Handler<H, S>)>,
    raw: Option<RawHandler<H, S>>,
}

impl<H: Header, S> Default for Dispatcher<H, S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<H: Header, S> Dispatcher<H, S> {
    /// No handlers.
    pub fn new() -> Self {
        Dispatcher { handlers: HashMap::new(), raw: None }
    }

    /// Handle messages of type `T` with `f`.
    pub fn on<T: MessageType>(
        &mut self,
        mut f: impl FnMut(&mut S, H, T) + Send + 'static,
    ) -> Result<&mut Self, RegistryError> {
        let id = T::type_id();
        if let Some((existing, _)) = self.handlers.get(&id) {
            return Err(RegistryError::Duplicate { name: T::NAME, id, existing });
        }
        let handler: Handler<H, S> = Box::new(move |s, m| {
            let (h, v) = m.decode::<T>()?;
            f(s, h, v);
            Ok(())
        });
        self.handlers.insert(id, (T::NAME, handler));
        Ok(self)
    }

    /// Handle raw messages with `f` (replacing a previous raw handler).
    pub fn on_raw(&mut self, f: impl FnMut(&mut S, H, Bytes) + Send + 'static) -> &mut Self {
        self.raw = Some(Box::new(f));
        self
    }

    /// The name of a registered type.
    pub fn name_of(&self, id: MessageTypeId) -> Option<&'static str> {
        self.handlers.get(&id).map(|(n, _)| *n)
    }

    /// Run the handler of `msg`'s type.
    pub fn dispatch(&mut self, state: &mut S, msg: Message<H>) -> Result<(), DispatchError> {
        match msg.kind() {
            BodyKind::Typed(id) => match self.handlers.get_mut(&id) {
                Some((_, h)) => Ok(h(state, msg)?),
                None => Err(DispatchError::UnknownType(id)),
            },
            BodyKind::Raw => match (&mut self.raw, msg.into_raw()) {
                (Some(f), Ok((h, b))) => {
                    f(state, h, b);
                    Ok(())
                }
                _ => Err(DispatchError::NoRawHandler),
            },
        }
    }
}
