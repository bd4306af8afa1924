//! What a topology provider offers a rule: its name, its topologies and the
//! node and edge attributes with their types. The type checker resolves a
//! rule's names against a [`Schema`]; the engine then works with indices.

/// The type of a value in a TARL expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// A real number (f64).
    Num,
    /// A truth value.
    Bool,
    /// A point in the plane.
    Pos,
    /// A node of the topology.
    Node,
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Type::Num => "number",
            Type::Bool => "bool",
            Type::Pos => "position",
            Type::Node => "node",
        })
    }
}

/// Index of a topology in a [`Schema`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopoId(pub usize);

/// Index of a node or edge attribute in a [`Schema`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttrId(pub usize);

/// One topology the provider maintains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyDecl {
    /// Its name in rules (`Tree`, `Phys`, ...).
    pub name: String,
    /// Directed topologies keep `a -> b` and `b -> a` apart; undirected ones
    /// hold every link in both directions and change both together.
    pub directed: bool,
}

/// The names a rule may use, as one provider defines them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    /// The provider's name (`TP` in the thesis's listings).
    pub provider: String,
    /// Its topologies.
    pub topologies: Vec<TopologyDecl>,
    /// Node attributes and their types.
    pub node_attrs: Vec<(String, Type)>,
    /// Edge attributes (of every topology) and their types.
    pub edge_attrs: Vec<(String, Type)>,
}

impl Schema {
    /// The topology called `name`.
    pub fn topology(&self, name: &str) -> Option<TopoId> {
        self.topologies
            .iter()
            .position(|t| t.name == name)
            .map(TopoId)
    }

    /// The node attribute called `name`, with its type.
    pub fn node_attr(&self, name: &str) -> Option<(AttrId, Type)> {
        self.node_attrs
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| (AttrId(i), self.node_attrs[i].1))
    }

    /// The edge attribute called `name`, with its type.
    pub fn edge_attr(&self, name: &str) -> Option<(AttrId, Type)> {
        self.edge_attrs
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| (AttrId(i), self.edge_attrs[i].1))
    }

    /// Whether topology `t` is directed (false for an unknown id).
    pub fn is_directed(&self, t: TopoId) -> bool {
        self.topologies.get(t.0).is_some_and(|d| d.directed)
    }
}
