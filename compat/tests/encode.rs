//! The encoder against the bytes CPython 3.11's `pickle.dumps` writes, and
//! against the decoder.
//!
//! Every expected literal below was printed by the pinned venv's Python for
//! the expression in the comment above it, with `pickle.dumps(obj, protocol)`
//! (unless the comment says it was written by hand).

mod pickle_graphs;

use proptest::prelude::*;
use tensorshare_compat::pickle::{
    Construction, EncodeError, EncodeOptions, Global, Limits, Node, NodeId, Object, Pickle,
    decode_all, encode, encode_into,
};

/// Builds arenas tersely.
#[derive(Default)]
struct Arena(Pickle);

impl Arena {
    fn add(&mut self, node: Node) -> NodeId {
        self.0.push(node)
    }
    fn int(&mut self, value: i64) -> NodeId {
        self.add(Node::Int(value))
    }
    fn str(&mut self, text: &str) -> NodeId {
        self.add(Node::Str(text.to_owned()))
    }
    fn list(&mut self, items: Vec<NodeId>) -> NodeId {
        self.add(Node::List(items))
    }
    fn tuple(&mut self, items: Vec<NodeId>) -> NodeId {
        self.add(Node::Tuple(items))
    }
    fn global(&mut self, module: &str, name: &str) -> NodeId {
        self.add(Node::Global(Global::copied(module, name)))
    }
    fn ints(&mut self, values: &[i64]) -> Vec<NodeId> {
        values.iter().map(|&v| self.int(v)).collect()
    }
    fn object(&mut self, callable: NodeId, construction: Construction) -> Object {
        Object {
            callable,
            construction,
            state: None,
            list_items: Vec::new(),
            dict_items: Vec::new(),
        }
    }
    fn with_root(mut self, root: NodeId) -> Pickle {
        self.0.set_root(root);
        self.0
    }
}

fn encoded(pickle: &Pickle, protocol: u8) -> Vec<u8> {
    encode(pickle, &EncodeOptions::new().with_protocol(protocol))
        .unwrap_or_else(|e| panic!("protocol {protocol}: {e}"))
}

/// Asserts the encoding for each `(protocol, bytes)` pair.
#[track_caller]
fn assert_encodes(pickle: &Pickle, expected: &[(u8, &[u8])]) {
    for &(protocol, bytes) in expected {
        let actual = encoded(pickle, protocol);
        assert_eq!(
            actual.escape_ascii().to_string(),
            bytes.escape_ascii().to_string(),
            "protocol {protocol}"
        );
    }
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn default_protocol_is_four_like_torch_forking_pickler() {
    assert_eq!(EncodeOptions::default().protocol(), 4);
    assert_eq!(EncodeOptions::DEFAULT_PROTOCOL, 4);
    assert!(EncodeOptions::new().fix_imports());
}

#[test]
fn atoms() {
    // (None, True, False)
    let mut a = Arena::default();
    let items = vec![
        a.add(Node::None),
        a.add(Node::Bool(true)),
        a.add(Node::Bool(false)),
    ];
    let root = a.tuple(items);
    assert_encodes(
        &a.with_root(root),
        &[
            (2, b"\x80\x02N\x88\x89\x87q\x00."),
            (
                4,
                b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00N\x88\x89\x87\x94.",
            ),
            (
                5,
                b"\x80\x05\x95\x06\x00\x00\x00\x00\x00\x00\x00N\x88\x89\x87\x94.",
            ),
        ],
    );
}

#[test]
fn small_ints_use_the_shortest_binint() {
    // [0, 255, 256, 65535, 65536, -1, 2**31 - 1, -2**31]
    let mut a = Arena::default();
    let items = a.ints(&[0, 255, 256, 65535, 65536, -1, (1 << 31) - 1, -(1 << 31)]);
    let root = a.list(items);
    let body: &[u8] = b"(K\x00K\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\xff\xff\xff\xff\
        J\xff\xff\xff\x7fJ\x00\x00\x00\x80e.";
    assert_encodes(
        &a.with_root(root),
        &[
            (2, &concat(&[b"\x80\x02]q\x00", body])),
            (
                4,
                &concat(&[b"\x80\x04\x95#\x00\x00\x00\x00\x00\x00\x00]\x94", body]),
            ),
        ],
    );
}

#[test]
fn big_ints_use_minimal_long1_and_small_big_ints_shrink_to_binint() {
    // [2**31, -2**31 - 1, 2**63 - 1, -2**63, 2**64, -2**64, -2**23, 2**100]
    let mut a = Arena::default();
    let mut items = a.ints(&[1 << 31, -(1 << 31) - 1, i64::MAX, i64::MIN]);
    items.push(a.add(Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 1])));
    items.push(a.add(Node::BigInt(vec![0, 0, 0, 0, 0, 0, 0, 0, 0xff])));
    // -2**23, sign-extended further than needed.
    items.push(a.add(Node::BigInt(vec![0, 0, 0x80, 0xff, 0xff, 0xff])));
    let mut big = vec![0; 12];
    big.push(0x10);
    items.push(a.add(Node::BigInt(big)));
    let root = a.list(items);
    let body: &[u8] = b"(\x8a\x05\x00\x00\x00\x80\x00\x8a\x05\xff\xff\xff\x7f\xff\
        \x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\
        \x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xff\
        J\x00\x00\x80\xff\x8a\x0d\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10e.";
    assert_encodes(
        &a.with_root(root),
        &[
            (2, &concat(&[b"\x80\x02]q\x00", body])),
            (
                4,
                &concat(&[b"\x80\x04\x95Q\x00\x00\x00\x00\x00\x00\x00]\x94", body]),
            ),
        ],
    );
}

#[test]
fn long4_above_255_bytes() {
    // 2**(8*300)
    let mut bytes = vec![0u8; 300];
    bytes.push(1);
    let mut a = Arena::default();
    let root = a.add(Node::BigInt(bytes.clone()));
    let out = encoded(&a.with_root(root), 2);
    assert_eq!(&out[..7], b"\x80\x02\x8b\x2d\x01\x00\x00");
    assert_eq!(&out[7..out.len() - 1], &bytes[..]);
}

#[test]
fn floats_are_big_endian_binfloat() {
    // [1.5, -0.0, float('inf')]
    let mut a = Arena::default();
    let items = [1.5, -0.0, f64::INFINITY]
        .map(|f| a.add(Node::Float(f)))
        .to_vec();
    let root = a.list(items);
    assert_encodes(
        &a.with_root(root),
        &[(
            2,
            b"\x80\x02]q\x00(G?\xf8\x00\x00\x00\x00\x00\x00G\x80\x00\x00\x00\x00\x00\x00\x00\
              G\x7f\xf0\x00\x00\x00\x00\x00\x00e.",
        )],
    );
}

#[test]
fn strs_per_protocol() {
    // ['', 'a', 'h\u00e9llo \u2713', 'x' * 300]
    let mut a = Arena::default();
    let x300 = "x".repeat(300);
    let items = vec![
        a.str(""),
        a.str("a"),
        a.str("h\u{e9}llo \u{2713}"),
        a.str(&x300),
    ];
    let root = a.list(items);
    let pickle = a.with_root(root);
    let p2 = concat(&[
        b"\x80\x02]q\x00(X\x00\x00\x00\x00q\x01X\x01\x00\x00\x00aq\x02",
        b"X\n\x00\x00\x00h\xc3\xa9llo \xe2\x9c\x93q\x03X,\x01\x00\x00",
        x300.as_bytes(),
        b"q\x04e.",
    ]);
    let p4 = concat(&[
        b"\x80\x04\x95K\x01\x00\x00\x00\x00\x00\x00]\x94(\x8c\x00\x94\x8c\x01a\x94",
        b"\x8c\nh\xc3\xa9llo \xe2\x9c\x93\x94X,\x01\x00\x00",
        x300.as_bytes(),
        b"\x94e.",
    ]);
    assert_encodes(&pickle, &[(2, &p2), (4, &p4)]);
}

#[test]
fn bytes_per_protocol() {
    // [b'', b'\x00\xff', b'x' * 300]
    let mut a = Arena::default();
    let items = vec![
        a.add(Node::Bytes(vec![].into())),
        a.add(Node::Bytes(vec![0, 0xff].into())),
        a.add(Node::Bytes(vec![b'x'; 300].into())),
    ];
    let root = a.list(items);
    let x300 = [b'x'; 300];
    let p2 = concat(&[
        b"\x80\x02]q\x00(c__builtin__\nbytes\nq\x01)Rq\x02c_codecs\nencode\nq\x03",
        b"X\x03\x00\x00\x00\x00\xc3\xbfq\x04X\x06\x00\x00\x00latin1q\x05\x86q\x06Rq\x07",
        b"h\x03X,\x01\x00\x00",
        &x300,
        b"q\x08h\x05\x86q\x09Rq\ne.",
    ]);
    let p3 = concat(&[
        b"\x80\x03]q\x00(C\x00q\x01C\x02\x00\xffq\x02B,\x01\x00\x00",
        &x300,
        b"q\x03e.",
    ]);
    let p4 = concat(&[
        b"\x80\x04\x95?\x01\x00\x00\x00\x00\x00\x00]\x94(C\x00\x94C\x02\x00\xff\x94B,\x01\x00\x00",
        &x300,
        b"\x94e.",
    ]);
    assert_encodes(&a.with_root(root), &[(2, &p2), (3, &p3), (4, &p4)]);
}

#[test]
fn protocol_2_bytes_share_the_codecs_global_and_latin1() {
    // [b'ab', b'cd']
    let mut a = Arena::default();
    let items = vec![
        a.add(Node::Bytes(b"ab".to_vec().into())),
        a.add(Node::Bytes(b"cd".to_vec().into())),
    ];
    let root = a.list(items);
    assert_encodes(
        &a.with_root(root),
        &[(
            2,
            b"\x80\x02]q\x00(c_codecs\nencode\nq\x01X\x02\x00\x00\x00abq\x02\
              X\x06\x00\x00\x00latin1q\x03\x86q\x04Rq\x05h\x01X\x02\x00\x00\x00cdq\x06\
              h\x03\x86q\x07Rq\x08e.",
        )],
    );
}

#[test]
fn bytearrays_per_protocol() {
    // [bytearray(), bytearray(b'a'), bytearray(b'ab')]
    let mut a = Arena::default();
    let items = vec![
        a.add(Node::ByteArray(Vec::new().into())),
        a.add(Node::ByteArray(b"a".into())),
        a.add(Node::ByteArray(b"ab".into())),
    ];
    let root = a.list(items);
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02]q\x00(c__builtin__\nbytearray\nq\x01)Rq\x02h\x01c_codecs\nencode\nq\x03\
                  X\x01\x00\x00\x00aq\x04X\x06\x00\x00\x00latin1q\x05\x86q\x06Rq\x07\x85q\x08Rq\x09\
                  h\x01h\x03X\x02\x00\x00\x00abq\nh\x05\x86q\x0bRq\x0c\x85q\x0dRq\x0ee.",
            ),
            (
                3,
                b"\x80\x03]q\x00(cbuiltins\nbytearray\nq\x01)Rq\x02h\x01C\x01aq\x03\x85q\x04Rq\x05\
                  h\x01C\x02abq\x06\x85q\x07Rq\x08e.",
            ),
            (
                4,
                b"\x80\x04\x956\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x08builtins\x94\
                  \x8c\x09bytearray\x94\x93\x94)R\x94h\x03C\x01a\x94\x85\x94R\x94h\x03C\x02ab\x94\
                  \x85\x94R\x94e.",
            ),
            (
                5,
                b"\x80\x05\x95&\x00\x00\x00\x00\x00\x00\x00]\x94(\x96\x00\x00\x00\x00\x00\x00\x00\
                  \x00\x94\x96\x01\x00\x00\x00\x00\x00\x00\x00a\x94\x96\x02\x00\x00\x00\x00\x00\x00\
                  \x00ab\x94e.",
            ),
        ],
    );
}

#[test]
fn tuples_by_length() {
    // ((), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4))
    let mut a = Arena::default();
    let mut items = Vec::new();
    for len in 0..=4 {
        let values: Vec<i64> = (1..=len).collect();
        let ints = a.ints(&values);
        items.push(a.tuple(ints));
    }
    let root = a.tuple(items);
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02()K\x01\x85q\x00K\x01K\x02\x86q\x01K\x01K\x02K\x03\x87q\x02\
                  (K\x01K\x02K\x03K\x04tq\x03tq\x04.",
            ),
            (
                4,
                b"\x80\x04\x95\"\x00\x00\x00\x00\x00\x00\x00()K\x01\x85\x94K\x01K\x02\x86\x94\
                  K\x01K\x02K\x03\x87\x94(K\x01K\x02K\x03K\x04t\x94t\x94.",
            ),
        ],
    );
}

#[test]
fn lists_and_dicts() {
    // [[], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': 2}]
    let mut a = Arena::default();
    let (one, two) = (a.int(1), a.int(2));
    let (key_a, key_b) = (a.str("a"), a.str("b"));
    let items = vec![
        a.list(vec![]),
        a.list(vec![one]),
        a.list(vec![one, two]),
        a.add(Node::Dict(vec![])),
        a.add(Node::Dict(vec![(key_a, one)])),
        a.add(Node::Dict(vec![(key_a, one), (key_b, two)])),
    ];
    let root = a.list(items);
    // CPython's 'a' is one object in both dicts; so is our node, hence h\x06.
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02]q\x00(]q\x01]q\x02K\x01a]q\x03(K\x01K\x02e}q\x04}q\x05\
                  X\x01\x00\x00\x00aq\x06K\x01s}q\x07(h\x06K\x01X\x01\x00\x00\x00bq\x08K\x02ue.",
            ),
            (
                4,
                b"\x80\x04\x95-\x00\x00\x00\x00\x00\x00\x00]\x94(]\x94]\x94K\x01a]\x94(K\x01K\x02e\
                  }\x94}\x94\x8c\x01a\x94K\x01s}\x94(h\x06K\x01\x8c\x01b\x94K\x02ue.",
            ),
        ],
    );
}

#[test]
fn sets_and_frozensets_per_protocol() {
    // [set(), {1}, {1, 2}, frozenset(), frozenset({1, 2})]
    let mut a = Arena::default();
    let (one, two) = (a.int(1), a.int(2));
    let items = vec![
        a.add(Node::Set(vec![])),
        a.add(Node::Set(vec![one])),
        a.add(Node::Set(vec![one, two])),
        a.add(Node::FrozenSet(vec![])),
        a.add(Node::FrozenSet(vec![one, two])),
    ];
    let root = a.list(items);
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02]q\x00(c__builtin__\nset\nq\x01]q\x02\x85q\x03Rq\x04h\x01]q\x05K\x01a\
                  \x85q\x06Rq\x07h\x01]q\x08(K\x01K\x02e\x85q\x09Rq\nc__builtin__\nfrozenset\nq\x0b\
                  ]q\x0c\x85q\x0dRq\x0eh\x0b]q\x0f(K\x01K\x02e\x85q\x10Rq\x11e.",
            ),
            (
                3,
                b"\x80\x03]q\x00(cbuiltins\nset\nq\x01]q\x02\x85q\x03Rq\x04h\x01]q\x05K\x01a\
                  \x85q\x06Rq\x07h\x01]q\x08(K\x01K\x02e\x85q\x09Rq\ncbuiltins\nfrozenset\nq\x0b\
                  ]q\x0c\x85q\x0dRq\x0eh\x0b]q\x0f(K\x01K\x02e\x85q\x10Rq\x11e.",
            ),
            (
                4,
                b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00]\x94(\x8f\x94\x8f\x94(K\x01\x90\
                  \x8f\x94(K\x01K\x02\x90(\x91\x94(K\x01K\x02\x91\x94e.",
            ),
        ],
    );
}

#[test]
fn shared_nodes_are_written_once() {
    // s = 'abc'; e = []; [s, s, e, (e, s)]
    let mut a = Arena::default();
    let s = a.str("abc");
    let e = a.list(vec![]);
    let pair = a.tuple(vec![e, s]);
    let root = a.list(vec![s, s, e, pair]);
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02]q\x00(X\x03\x00\x00\x00abcq\x01h\x01]q\x02h\x02h\x01\x86q\x03e.",
            ),
            (
                4,
                b"\x80\x04\x95\x15\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x03abc\x94h\x01]\x94\
                  h\x02h\x01\x86\x94e.",
            ),
        ],
    );
}

#[test]
fn a_list_containing_itself() {
    // l = []; l.append(l); l
    let mut a = Arena::default();
    let root = a.list(vec![]);
    let mut pickle = a.with_root(root);
    *pickle.get_mut(root).unwrap() = Node::List(vec![root]);
    assert_encodes(
        &pickle,
        &[
            (2, b"\x80\x02]q\x00h\x00a."),
            (
                4,
                b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94h\x00a.",
            ),
        ],
    );
}

#[test]
fn a_dict_containing_itself() {
    // d = {}; d['self'] = d; d
    let mut a = Arena::default();
    let root = a.add(Node::Dict(vec![]));
    let key = a.str("self");
    let mut pickle = a.with_root(root);
    *pickle.get_mut(root).unwrap() = Node::Dict(vec![(key, root)]);
    assert_encodes(
        &pickle,
        &[
            (2, b"\x80\x02}q\x00X\x04\x00\x00\x00selfq\x01h\x00s."),
            (
                4,
                b"\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x04self\x94h\x00s.",
            ),
        ],
    );
}

#[test]
fn a_tuple_in_a_cycle_through_a_list_is_rebuilt_once() {
    // l = []; t = (l,); l.append(t); t
    let mut a = Arena::default();
    let list = a.list(vec![]);
    let root = a.tuple(vec![list]);
    let mut pickle = a.with_root(root);
    *pickle.get_mut(list).unwrap() = Node::List(vec![root]);
    assert_encodes(
        &pickle,
        &[
            (2, b"\x80\x02]q\x00h\x00\x85q\x01a0h\x01."),
            (
                4,
                b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94h\x00\x85\x94a0h\x01.",
            ),
        ],
    );

    // l = []; t = (l, 1, 2, 3); l.append(t); t
    let mut a = Arena::default();
    let list = a.list(vec![]);
    let mut items = vec![list];
    items.extend(a.ints(&[1, 2, 3]));
    let root = a.tuple(items);
    let mut pickle = a.with_root(root);
    *pickle.get_mut(list).unwrap() = Node::List(vec![root]);
    assert_encodes(
        &pickle,
        &[
            (
                2,
                b"\x80\x02(]q\x00(h\x00K\x01K\x02K\x03tq\x01aK\x01K\x02K\x031h\x01.",
            ),
            (
                4,
                b"\x80\x04\x95\x19\x00\x00\x00\x00\x00\x00\x00(]\x94(h\x00K\x01K\x02K\x03t\x94a\
                  K\x01K\x02K\x031h\x01.",
            ),
        ],
    );
}

#[test]
fn equal_globals_are_one_object() {
    // [set, set, collections.OrderedDict], with the two `set`s as two nodes
    let mut a = Arena::default();
    let items = vec![
        a.global("builtins", "set"),
        a.global("builtins", "set"),
        a.global("collections", "OrderedDict"),
    ];
    let root = a.list(items);
    let pickle = a.with_root(root);
    assert_encodes(
        &pickle,
        &[
            (
                2,
                b"\x80\x02]q\x00(c__builtin__\nset\nq\x01h\x01ccollections\nOrderedDict\nq\x02e.",
            ),
            (
                3,
                b"\x80\x03]q\x00(cbuiltins\nset\nq\x01h\x01ccollections\nOrderedDict\nq\x02e.",
            ),
            (
                4,
                b"\x80\x04\x958\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x08builtins\x94\x8c\x03set\
                  \x94\x93\x94h\x03\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94e.",
            ),
        ],
    );
    let verbatim = EncodeOptions::new()
        .with_protocol(2)
        .with_fix_imports(false);
    assert_eq!(
        encode(&pickle, &verbatim).unwrap(),
        b"\x80\x02]q\x00(cbuiltins\nset\nq\x01h\x01ccollections\nOrderedDict\nq\x02e."
    );
}

#[test]
fn nested_globals_go_through_getattr_below_protocol_4() {
    // json.decoder.JSONDecoder.decode
    let mut a = Arena::default();
    let root = a.global("json.decoder", "JSONDecoder.decode");
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02c__builtin__\ngetattr\nq\x00cjson.decoder\nJSONDecoder\nq\x01\
                  X\x06\x00\x00\x00decodeq\x02\x86q\x03Rq\x04.",
            ),
            (
                3,
                b"\x80\x03cbuiltins\ngetattr\nq\x00cjson.decoder\nJSONDecoder\nq\x01\
                  X\x06\x00\x00\x00decodeq\x02\x86q\x03Rq\x04.",
            ),
            (
                4,
                b"\x80\x04\x95'\x00\x00\x00\x00\x00\x00\x00\x8c\x0cjson.decoder\x94\
                  \x8c\x12JSONDecoder.decode\x94\x93\x94.",
            ),
        ],
    );
}

#[test]
fn reduce_with_dict_items() {
    // collections.OrderedDict([('a', 1), ('b', 2)])
    let mut a = Arena::default();
    let class = a.global("collections", "OrderedDict");
    let args = a.tuple(vec![]);
    let mut object = a.object(class, Construction::Reduce { args });
    let (key_a, key_b) = (a.str("a"), a.str("b"));
    let (one, two) = (a.int(1), a.int(2));
    object.dict_items = vec![(key_a, one), (key_b, two)];
    let root = a.add(Node::Object(Box::new(object)));
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00aq\x02K\x01\
                  X\x01\x00\x00\x00bq\x03K\x02u.",
            ),
            (
                4,
                b"\x80\x04\x950\x00\x00\x00\x00\x00\x00\x00\x8c\x0bcollections\x94\
                  \x8c\x0bOrderedDict\x94\x93\x94)R\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94K\x02u.",
            ),
        ],
    );
}

#[test]
fn newobj_with_build_state() {
    // argparse.Namespace(a=1)
    let mut a = Arena::default();
    let class = a.global("argparse", "Namespace");
    let args = a.tuple(vec![]);
    let mut object = a.object(class, Construction::NewObj { args });
    let (key, one) = (a.str("a"), a.int(1));
    object.state = Some(a.add(Node::Dict(vec![(key, one)])));
    let root = a.add(Node::Object(Box::new(object)));
    assert_encodes(
        &a.with_root(root),
        &[
            (2, b"\x80\x02cargparse\nNamespace\nq\x00)\x81q\x01}q\x02X\x01\x00\x00\x00aq\x03K\x01sb."),
            (
                4,
                b"\x80\x04\x95'\x00\x00\x00\x00\x00\x00\x00\x8c\x08argparse\x94\x8c\x09Namespace\
                  \x94\x93\x94)\x81\x94}\x94\x8c\x01a\x94K\x01sb.",
            ),
        ],
    );
}

#[test]
fn newobj_ex_needs_protocol_4() {
    // Written by hand: cls, args, kwargs, NEWOBJ_EX, then the object is memoized.
    let mut a = Arena::default();
    let class = a.global("m", "C");
    let args = a.tuple(vec![]);
    let kwargs = a.add(Node::Dict(vec![]));
    let object = a.object(class, Construction::NewObjEx { args, kwargs });
    let root = a.add(Node::Object(Box::new(object)));
    let pickle = a.with_root(root);
    assert_encodes(
        &pickle,
        &[(
            4,
            b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x01m\x94\x8c\x01C\x94\x93\x94)}\x94\
              \x92\x94.",
        )],
    );
    let err = encode(&pickle, &EncodeOptions::new().with_protocol(3)).unwrap_err();
    assert!(
        matches!(
            err,
            EncodeError::ProtocolTooLow {
                required: 4,
                protocol: 3,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn persistent_ids_are_written_at_each_reference() {
    // [m, m, 1] with a Pickler whose persistent_id(m) returns a new
    // ('storage', 'k0') tuple each time, over the same two strings.
    let mut a = Arena::default();
    let (storage, key) = (a.str("storage"), a.str("k0"));
    let first = a.tuple(vec![storage, key]);
    let second = a.tuple(vec![storage, key]);
    let items = vec![
        a.add(Node::PersistentId(first)),
        a.add(Node::PersistentId(second)),
        a.int(1),
    ];
    let root = a.list(items);
    assert_encodes(
        &a.with_root(root),
        &[
            (
                2,
                b"\x80\x02]q\x00(X\x07\x00\x00\x00storageq\x01X\x02\x00\x00\x00k0q\x02\x86q\x03Q\
                  h\x01h\x02\x86q\x04QK\x01e.",
            ),
            (
                4,
                b"\x80\x04\x95 \x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x07storage\x94\x8c\x02k0\x94\
                  \x86\x94Qh\x01h\x02\x86\x94QK\x01e.",
            ),
        ],
    );
}

#[test]
fn one_persistent_id_node_referenced_twice_fetches_its_pid_from_the_memo() {
    let mut a = Arena::default();
    let key = a.str("k0");
    let pid = a.tuple(vec![key]);
    let persistent = a.add(Node::PersistentId(pid));
    let root = a.list(vec![persistent, persistent]);
    assert_encodes(
        &a.with_root(root),
        &[(
            2,
            b"\x80\x02]q\x00(X\x02\x00\x00\x00k0q\x01\x85q\x02Qh\x02Qe.",
        )],
    );
}

#[test]
fn large_payloads_are_written_outside_frames() {
    // [b'ab', b'x' * 70000, 'y' * 65536, 1], protocol 4: a frame, two unframed
    // payloads (the MEMOIZE between them is a frame too small to keep), a frame.
    let mut a = Arena::default();
    let items = vec![
        a.add(Node::Bytes(b"ab".to_vec().into())),
        a.add(Node::Bytes(vec![b'x'; 70000].into())),
        a.str(&"y".repeat(65536)),
        a.int(1),
    ];
    let root = a.list(items);
    let out = encoded(&a.with_root(root), 4);
    assert_eq!(
        &out[..19],
        b"\x80\x04\x95\x08\x00\x00\x00\x00\x00\x00\x00]\x94(C\x02ab\x94"
    );
    assert_eq!(&out[19..24], b"B\x70\x11\x01\x00");
    let after_bytes = 24 + 70000;
    assert_eq!(&out[after_bytes..after_bytes + 6], b"\x94X\x00\x00\x01\x00");
    let after_str = after_bytes + 6 + 65536;
    assert_eq!(
        &out[after_str..],
        b"\x95\x05\x00\x00\x00\x00\x00\x00\x00\x94K\x01e."
    );
}

#[test]
fn frames_close_past_64_kib() {
    // A list of 30000 distinct 3-character strings: each save() checks the
    // frame, so frames close at the first item boundary past 65536 bytes.
    let mut a = Arena::default();
    let items = (0..30000)
        .map(|i| a.str(&format!("{:03}", i % 1000)))
        .collect();
    let root = a.list(items);
    let out = encoded(&a.with_root(root), 4);
    let mut pos = 2;
    let mut frames = Vec::new();
    while out.get(pos) == Some(&0x95) {
        let len = u64::from_le_bytes(out[pos + 1..pos + 9].try_into().unwrap()) as usize;
        frames.push(len);
        pos += 9 + len;
    }
    assert_eq!(pos, out.len(), "frames cover the whole pickle");
    // Each item is SHORT_BINUNICODE (2 + 3) + MEMOIZE = 6 bytes.
    assert!(frames.len() >= 2, "{frames:?}");
    for &len in &frames[..frames.len() - 1] {
        assert!((65536..65536 + 6).contains(&len), "{frames:?}");
    }
}

#[test]
fn a_deep_graph_encodes_without_recursion() {
    // [[[...[]...]]], 200,000 levels: the walk keeps its own stack.
    let depth = 200_000;
    let mut a = Arena::default();
    let mut inner = a.list(vec![]);
    for _ in 0..depth {
        inner = a.list(vec![inner]);
    }
    let pickle = a.with_root(inner);
    let out = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || encoded(&pickle, 4))
        .unwrap()
        .join()
        .expect("encoding a deep graph must not overflow a small stack");
    // Per level `]` MEMOIZE, and `a` on the way out.
    let opcodes = out.iter().filter(|&&b| b == b']').count();
    assert_eq!(opcodes, depth + 1);
}

#[test]
fn errors_name_the_problem() {
    let mut a = Arena::default();
    let one = a.int(1);
    let pickle = a.with_root(one);
    for protocol in [0, 1, 6] {
        let err = encode(&pickle, &EncodeOptions::new().with_protocol(protocol)).unwrap_err();
        assert_eq!(err, EncodeError::UnsupportedProtocol { protocol });
    }

    assert_eq!(
        encode(&Pickle::new(), &EncodeOptions::new()),
        Err(EncodeError::NoRoot)
    );

    // A node id from a larger arena.
    let mut big = Arena::default();
    big.int(0);
    let foreign = big.int(1);
    let mut a = Arena::default();
    let root = a.list(vec![foreign]);
    let err = encode(&a.with_root(root), &EncodeOptions::new()).unwrap_err();
    assert_eq!(
        err,
        EncodeError::InvalidNodeId {
            id: foreign,
            parent: Some(root),
            len: 1
        }
    );
    assert!(err.to_string().contains("referenced by node 0"), "{err}");

    // t = (t,) cannot exist in Python.
    let mut a = Arena::default();
    let root = a.tuple(vec![]);
    let mut pickle = a.with_root(root);
    *pickle.get_mut(root).unwrap() = Node::Tuple(vec![root]);
    let err = encode(&pickle, &EncodeOptions::new()).unwrap_err();
    assert_eq!(err, EncodeError::UnencodableCycle { node: root });

    // A set holding a tuple holding the set: fine with EMPTY_SET first in
    // protocol 4, impossible through set([...]) in protocol 2.
    let mut a = Arena::default();
    let set = a.add(Node::Set(vec![]));
    let tuple = a.tuple(vec![set]);
    let mut pickle = a.with_root(set);
    *pickle.get_mut(set).unwrap() = Node::Set(vec![tuple]);
    encode(&pickle, &EncodeOptions::new()).expect("encodes");
    let err = encode(&pickle, &EncodeOptions::new().with_protocol(2)).unwrap_err();
    assert!(matches!(err, EncodeError::UnencodableCycle { .. }), "{err}");

    // REDUCE arguments that are not a tuple.
    let mut a = Arena::default();
    let class = a.global("m", "f");
    let args = a.list(vec![]);
    let object = a.object(class, Construction::Reduce { args });
    let root = a.add(Node::Object(Box::new(object)));
    let err = encode(&a.with_root(root), &EncodeOptions::new()).unwrap_err();
    assert!(
        matches!(err, EncodeError::MalformedObject { node, .. } if node == root),
        "{err}"
    );

    // GLOBAL is line-based; protocol 2 names are ASCII.
    let mut a = Arena::default();
    let root = a.global("m", "a\nb");
    let pickle = a.with_root(root);
    encode(&pickle, &EncodeOptions::new()).expect("encodes");
    let err = encode(&pickle, &EncodeOptions::new().with_protocol(3)).unwrap_err();
    assert!(
        matches!(err, EncodeError::UnencodableGlobal { .. }),
        "{err}"
    );
    let mut a = Arena::default();
    let root = a.global("m\u{e9}", "f");
    let pickle = a.with_root(root);
    encode(&pickle, &EncodeOptions::new().with_protocol(3)).expect("encodes at protocol 3");
    let err = encode(&pickle, &EncodeOptions::new().with_protocol(2)).unwrap_err();
    assert!(
        matches!(err, EncodeError::UnencodableGlobal { .. }),
        "{err}"
    );
}

#[test]
fn encode_into_appends_and_restores_on_error() {
    let mut a = Arena::default();
    let root = a.int(7);
    let pickle = a.with_root(root);
    let mut out = b"prefix".to_vec();
    encode_into(&pickle, &EncodeOptions::new().with_protocol(2), &mut out).unwrap();
    assert_eq!(out, b"prefix\x80\x02K\x07.");

    let mut a = Arena::default();
    let class = a.global("m", "f");
    let args = a.list(vec![]);
    let object = a.object(class, Construction::Reduce { args });
    let inner = a.add(Node::Object(Box::new(object)));
    let root = a.list(vec![inner]);
    let bad = a.with_root(root);
    let mut out = b"prefix".to_vec();
    assert!(encode_into(&bad, &EncodeOptions::new(), &mut out).is_err());
    assert_eq!(out, b"prefix");
}

#[test]
fn the_memo_switches_to_long_binput_past_255() {
    // [str(i) for i in range(300)] as distinct strings, then the first again.
    let mut a = Arena::default();
    let mut items: Vec<NodeId> = (0..300).map(|i| a.str(&format!("s{i}"))).collect();
    items.push(items[299]);
    let root = a.list(items);
    let out = encoded(&a.with_root(root), 2);
    // The list is memo 0, s{i} is memo i + 1; s299 is memo 300 = 0x12c.
    assert!(
        out.windows(5).any(|w| w == b"r\x2c\x01\x00\x00"),
        "LONG_BINPUT 300"
    );
    assert!(out.ends_with(b"j\x2c\x01\x00\x00e."), "LONG_BINGET 300");
}

fn allow_every_global(_: &str, _: &str) -> bool {
    true
}

fn proptest_cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(), ..ProptestConfig::default() })]

    /// Decoding what was encoded gives the graph back: node for node in
    /// protocol 5, where every value has its own opcode, and as Python would
    /// see it (through the `__reduce__` forms) in every protocol.
    #[test]
    fn decode_gives_back_the_encoded_graph(steps in pickle_graphs::steps()) {
        let pickle = pickle_graphs::build(&steps);
        let expected = pickle_graphs::canonical(&pickle);
        for protocol in 2..=5 {
            let bytes = encoded(&pickle, protocol);
            let decoded = decode_all(&bytes, &allow_every_global, &Limits::default())
                .map_err(|e| TestCaseError::fail(format!("protocol {protocol}: {e}")))?;
            prop_assert_eq!(&pickle_graphs::canonical(&decoded.pickle), &expected,
                "protocol {}", protocol);
            if protocol == 5 {
                pickle_graphs::same_graph(&pickle, &decoded.pickle)
                    .map_err(|e| TestCaseError::fail(format!("protocol 5: {e}")))?;
            }
        }
    }
}

#[test]
fn deep_graphs_decode_back() {
    // [[[...[]...]]] 100,000 levels deep, through both walks.
    let depth = 100_000;
    let mut a = Arena::default();
    let mut inner = a.list(vec![]);
    for _ in 0..depth {
        inner = a.list(vec![inner]);
    }
    let pickle = a.with_root(inner);
    for protocol in [2, 5] {
        let bytes = encoded(&pickle, protocol);
        let limits = Limits::default().with_max_depth(depth + 1);
        let decoded = decode_all(&bytes, &allow_every_global, &limits)
            .unwrap()
            .pickle;
        let mut levels = 0;
        let mut node = decoded.root().expect("a decoded pickle has a root");
        while let Node::List(items) = decoded.get(node).unwrap() {
            match items.as_slice() {
                [next] => node = *next,
                [] => break,
                _ => panic!("a list of {} items at level {levels}", items.len()),
            }
            levels += 1;
        }
        assert_eq!(levels, depth, "protocol {protocol}");
    }
}
