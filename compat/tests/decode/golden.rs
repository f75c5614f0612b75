//! Golden pickles written by CPython 3.11 (the pinned test venv), with what
//! CPython's own pure-Python unpickler (`pickle._Unpickler`) reads from them.
//!
//! `expected` is JSON from a symbolic subclass of `pickle._Unpickler`: its
//! `find_class` (which renames Python 2 globals below protocol 3, as
//! CPython's does), `persistent_load`, `REDUCE`, `NEWOBJ`, `NEWOBJ_EX`,
//! `INST`/`OBJ` and `BUILD` record instead of calling, and dicts and sets
//! keep their pickled order. The JSON shape is the one `render` in
//! `decode.rs` gives. Every golden also loads with the C unpickler.
//!
//! Together the goldens contain every opcode of protocols 0 to 5 except
//! those refused by design (EXT1/2/4, NEXT_BUFFER, READONLY_BUFFER), as
//! `pickletools.genops` lists them. Opcodes CPython 3 never writes (STRING,
//! BINSTRING, SHORT_BINSTRING, INST, OBJ, DUP, BINUNICODE8, BINBYTES8, DICT
//! with items) come as Python 2 wrote them or by hand.
//!
//! Classes named in the expressions are defined in the generating script:
//!
//! ```python
//! class Plain:
//!     def __init__(self): self.a = 1
//! class MyList(list): pass            # mylist(): MyList([1, 2]) with .tag = 'x'
//! class MyDict(dict): pass            # mydict(): MyDict(a=1) with .tag = 'y'
//! class WithKw:                       # NEWOBJ_EX at protocol 4+
//!     def __new__(cls, *args, **kwargs): return object.__new__(cls)
//!     def __getnewargs_ex__(self): return ((1,), {'k': 2})
//! class PidPickler(pickle.Pickler):   # storage(): a Plain with .a = 'storage'
//!     def persistent_id(self, obj): ...
//! ```

/// One golden pickle.
pub struct Golden {
    /// What it covers, and its protocol.
    pub name: &'static str,
    /// The pickle, as CPython wrote it.
    pub bytes: &'static [u8],
    /// What `render` must give, as JSON.
    pub expected: &'static str,
}

/// Every golden pickle.
pub const GOLDENS: &[Golden] = &[
    Golden {
        name: "scalars_p0",
        // pickle.dumps([None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100], protocol=0)
        bytes: b"(lp0\nNaI01\naI00\naI0\naI1\naI255\naI256\naI65535\naI65536\naI-1\naI-2147483648\naI2147483647\naL2147483648L\naL9223372036854775807L\naL-9223372036854775808L\naL9223372036854775808L\naL-9223372036854775809L\naL1180591620717411303424L\naL-1180591620717411303424L\naF1.5\naF-0.0\naFinf\naF1e+100\na.",
        expected: r#"[null,true,false,0,1,255,256,65535,65536,-1,-2147483648,2147483647,2147483648,9223372036854775807,-9223372036854775808,{"bigint":"000000000000008000"},{"bigint":"ffffffffffffff7fff"},{"bigint":"000000000000000040"},{"bigint":"0000000000000000c0"},{"float":"3ff8000000000000"},{"float":"8000000000000000"},{"float":"7ff0000000000000"},{"float":"54b249ad2594c37d"}]"#,
    },
    Golden {
        name: "text_p0",
        // pickle.dumps(['', 'abc', 'caf\xe9 \u20ac \U0001f600 back\\slash\nnewline\r\x00\x1a', b'', b'\x00\xff', bytearray(b'ab')], protocol=0)
        bytes: b"(lp0\nV\np1\naVabc\np2\naVcaf\xe9 \\u20ac \\U0001f600 back\\u005cslash\\u000anewline\\u000d\\u0000\\u001a\np3\nac__builtin__\nbytes\np4\n(tRp5\nac_codecs\nencode\np6\n(V\\u0000\xff\np7\nVlatin1\np8\ntp9\nRp10\nac__builtin__\nbytearray\np11\n(g6\n(Vab\np12\ng8\ntp13\nRp14\ntp15\nRp16\na.",
        expected: r#"["","abc","caf\u00e9 \u20ac \ud83d\ude00 back\\slash\nnewline\r\u0000\u001a",{"call":{"global":["builtins","bytes"]},"how":"reduce","args":{"tuple":[]}},{"call":{"global":["_codecs","encode"]},"how":"reduce","args":{"tuple":["\u0000\u00ff","latin1"]}},{"call":{"global":["builtins","bytearray"]},"how":"reduce","args":{"tuple":[{"call":{"global":["_codecs","encode"]},"how":"reduce","args":{"tuple":["ab","latin1"]}}]}}]"#,
    },
    Golden {
        name: "containers_p0",
        // pickle.dumps([(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()], protocol=0)
        bytes: b"(lp0\n(ta(I1\ntp1\na(I1\nI2\ntp2\na(I1\nI2\nI3\ntp3\na(I1\nI2\nI3\nI4\ntp4\na(lp5\na(lp6\nI1\naa(lp7\nI1\naI2\naa(dp8\na(dp9\nVa\np10\nI1\nsa(dp11\ng10\nI1\nsVb\np12\n(lp13\nI2\nasac__builtin__\nset\np14\n((lp15\nI1\naI2\natp16\nRp17\nac__builtin__\nfrozenset\np18\n((lp19\nI3\natp20\nRp21\nag14\n((lp22\ntp23\nRp24\na.",
        expected: r#"[{"tuple":[]},{"tuple":[1]},{"tuple":[1,2]},{"tuple":[1,2,3]},{"tuple":[1,2,3,4]},[],[1],[1,2],{"dict":[]},{"dict":[["a",1]]},{"dict":[["a",1],["b",[2]]]},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[1,2]]}},{"call":{"global":["builtins","frozenset"]},"how":"reduce","args":{"tuple":[[3]]}},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[]]}}]"#,
    },
    Golden {
        name: "objects_p0",
        // pickle.dumps([collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()], protocol=0)
        bytes: b"(lp0\nccollections\nOrderedDict\np1\n(tRp2\nVa\np3\nI1\nsVb\np4\nI2\nsaccopy_reg\n_reconstructor\np5\n(c__main__\nPlain\np6\nc__builtin__\nobject\np7\nNtp8\nRp9\n(dp10\ng3\nI1\nsbag5\n(c__main__\nMyList\np11\nc__builtin__\nlist\np12\n(lp13\nI1\naI2\natp14\nRp15\n(dp16\nVtag\np17\nVx\np18\nsbag5\n(c__main__\nMyDict\np19\nc__builtin__\ndict\np20\n(dp21\ng3\nI1\nstp22\nRp23\n(dp24\ng17\nVy\np25\nsbag5\n(c__main__\nWithKw\np26\ng7\nNtp27\nRp28\na.",
        expected: r#"[{"call":{"global":["collections","OrderedDict"]},"how":"reduce","args":{"tuple":[]},"dict_items":[["a",1],["b",2]]},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","Plain"]},{"global":["builtins","object"]},null]},"state":{"dict":[["a",1]]}},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","MyList"]},{"global":["builtins","list"]},[1,2]]},"state":{"dict":[["tag","x"]]}},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","MyDict"]},{"global":["builtins","dict"]},{"dict":[["a",1]]}]},"state":{"dict":[["tag","y"]]}},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","WithKw"]},{"global":["builtins","object"]},null]}}]"#,
    },
    Golden {
        name: "memo_p0",
        // pickle.dumps((lambda s: (s, s, [s]))([1]), protocol=0)
        bytes: b"((lp0\nI1\nag0\n(lp1\ng0\natp2\n.",
        expected: r#"{"tuple":[[1],[1],[[1]]]}"#,
    },
    Golden {
        name: "cycle_p0",
        // pickle.dumps((lambda l: (l.append(l), l)[1])([]), protocol=0)
        bytes: b"(lp0\ng0\na.",
        expected: r#"[{"cycle":null}]"#,
    },
    Golden {
        name: "recursive_tuple_p0",
        // pickle.dumps((lambda l: (l.append((l,)), l[0])[1])([]), protocol=0)
        bytes: b"((lp0\n(g0\ntp1\na00g1\n.",
        expected: r#"{"tuple":[[{"cycle":null}]]}"#,
    },
    Golden {
        name: "persistent_p0",
        // PidPickler(f, 0).dump([storage(), storage()]); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)
        bytes: b"(lp0\nPstorage0\naPstorage0\na.",
        expected: r#"[{"persid":"storage0"},{"persid":"storage0"}]"#,
    },
    Golden {
        name: "scalars_p1",
        // pickle.dumps([None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100], protocol=1)
        bytes: b"]q\x00(NI01\nI00\nK\x00K\x01K\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\xff\xff\xff\xffJ\x00\x00\x00\x80J\xff\xff\xff\x7fL2147483648L\nL9223372036854775807L\nL-9223372036854775808L\nL9223372036854775808L\nL-9223372036854775809L\nL1180591620717411303424L\nL-1180591620717411303424L\nG?\xf8\x00\x00\x00\x00\x00\x00G\x80\x00\x00\x00\x00\x00\x00\x00G\x7f\xf0\x00\x00\x00\x00\x00\x00GT\xb2I\xad%\x94\xc3}e.",
        expected: r#"[null,true,false,0,1,255,256,65535,65536,-1,-2147483648,2147483647,2147483648,9223372036854775807,-9223372036854775808,{"bigint":"000000000000008000"},{"bigint":"ffffffffffffff7fff"},{"bigint":"000000000000000040"},{"bigint":"0000000000000000c0"},{"float":"3ff8000000000000"},{"float":"8000000000000000"},{"float":"7ff0000000000000"},{"float":"54b249ad2594c37d"}]"#,
    },
    Golden {
        name: "text_p1",
        // pickle.dumps(['', 'abc', 'caf\xe9 \u20ac \U0001f600 back\\slash\nnewline\r\x00\x1a', b'', b'\x00\xff', bytearray(b'ab')], protocol=1)
        bytes: b"]q\x00(X\x00\x00\x00\x00q\x01X\x03\x00\x00\x00abcq\x02X$\x00\x00\x00caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash\nnewline\x0d\x00\x1aq\x03c__builtin__\nbytes\nq\x04)Rq\x05c_codecs\nencode\nq\x06(X\x03\x00\x00\x00\x00\xc3\xbfq\x07X\x06\x00\x00\x00latin1q\x08tq\x09Rq\nc__builtin__\nbytearray\nq\x0b(h\x06(X\x02\x00\x00\x00abq\x0ch\x08tq\x0dRq\x0etq\x0fRq\x10e.",
        expected: r#"["","abc","caf\u00e9 \u20ac \ud83d\ude00 back\\slash\nnewline\r\u0000\u001a",{"call":{"global":["builtins","bytes"]},"how":"reduce","args":{"tuple":[]}},{"call":{"global":["_codecs","encode"]},"how":"reduce","args":{"tuple":["\u0000\u00ff","latin1"]}},{"call":{"global":["builtins","bytearray"]},"how":"reduce","args":{"tuple":[{"call":{"global":["_codecs","encode"]},"how":"reduce","args":{"tuple":["ab","latin1"]}}]}}]"#,
    },
    Golden {
        name: "containers_p1",
        // pickle.dumps([(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()], protocol=1)
        bytes: b"]q\x00()(K\x01tq\x01(K\x01K\x02tq\x02(K\x01K\x02K\x03tq\x03(K\x01K\x02K\x03K\x04tq\x04]q\x05]q\x06K\x01a]q\x07(K\x01K\x02e}q\x08}q\x09X\x01\x00\x00\x00aq\nK\x01s}q\x0b(h\nK\x01X\x01\x00\x00\x00bq\x0c]q\x0dK\x02auc__builtin__\nset\nq\x0e(]q\x0f(K\x01K\x02etq\x10Rq\x11c__builtin__\nfrozenset\nq\x12(]q\x13K\x03atq\x14Rq\x15h\x0e(]q\x16tq\x17Rq\x18e.",
        expected: r#"[{"tuple":[]},{"tuple":[1]},{"tuple":[1,2]},{"tuple":[1,2,3]},{"tuple":[1,2,3,4]},[],[1],[1,2],{"dict":[]},{"dict":[["a",1]]},{"dict":[["a",1],["b",[2]]]},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[1,2]]}},{"call":{"global":["builtins","frozenset"]},"how":"reduce","args":{"tuple":[[3]]}},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[]]}}]"#,
    },
    Golden {
        name: "objects_p1",
        // pickle.dumps([collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()], protocol=1)
        bytes: b"]q\x00(ccollections\nOrderedDict\nq\x01)Rq\x02(X\x01\x00\x00\x00aq\x03K\x01X\x01\x00\x00\x00bq\x04K\x02uccopy_reg\n_reconstructor\nq\x05(c__main__\nPlain\nq\x06c__builtin__\nobject\nq\x07Ntq\x08Rq\x09}q\nh\x03K\x01sbh\x05(c__main__\nMyList\nq\x0bc__builtin__\nlist\nq\x0c]q\x0d(K\x01K\x02etq\x0eRq\x0f}q\x10X\x03\x00\x00\x00tagq\x11X\x01\x00\x00\x00xq\x12sbh\x05(c__main__\nMyDict\nq\x13c__builtin__\ndict\nq\x14}q\x15h\x03K\x01stq\x16Rq\x17}q\x18h\x11X\x01\x00\x00\x00yq\x19sbh\x05(c__main__\nWithKw\nq\x1ah\x07Ntq\x1bRq\x1ce.",
        expected: r#"[{"call":{"global":["collections","OrderedDict"]},"how":"reduce","args":{"tuple":[]},"dict_items":[["a",1],["b",2]]},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","Plain"]},{"global":["builtins","object"]},null]},"state":{"dict":[["a",1]]}},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","MyList"]},{"global":["builtins","list"]},[1,2]]},"state":{"dict":[["tag","x"]]}},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","MyDict"]},{"global":["builtins","dict"]},{"dict":[["a",1]]}]},"state":{"dict":[["tag","y"]]}},{"call":{"global":["copyreg","_reconstructor"]},"how":"reduce","args":{"tuple":[{"global":["__main__","WithKw"]},{"global":["builtins","object"]},null]}}]"#,
    },
    Golden {
        name: "memo_p1",
        // pickle.dumps((lambda s: (s, s, [s]))([1]), protocol=1)
        bytes: b"(]q\x00K\x01ah\x00]q\x01h\x00atq\x02.",
        expected: r#"{"tuple":[[1],[1],[[1]]]}"#,
    },
    Golden {
        name: "cycle_p1",
        // pickle.dumps((lambda l: (l.append(l), l)[1])([]), protocol=1)
        bytes: b"]q\x00h\x00a.",
        expected: r#"[{"cycle":null}]"#,
    },
    Golden {
        name: "recursive_tuple_p1",
        // pickle.dumps((lambda l: (l.append((l,)), l[0])[1])([]), protocol=1)
        bytes: b"(]q\x00(h\x00tq\x01a1h\x01.",
        expected: r#"{"tuple":[[{"cycle":null}]]}"#,
    },
    Golden {
        name: "persistent_p1",
        // PidPickler(f, 1).dump([storage(), storage()]); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)
        bytes: b"]q\x00((X\x07\x00\x00\x00storageq\x01X\x04\x00\x00\x00key0q\x02X\x03\x00\x00\x00cpuq\x03K\x04tq\x04Qh\x04Qe.",
        expected: r#"[{"persid":{"tuple":["storage","key0","cpu",4]}},{"persid":{"tuple":["storage","key0","cpu",4]}}]"#,
    },
    Golden {
        name: "scalars_p2",
        // pickle.dumps([None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100], protocol=2)
        bytes: b"\x80\x02]q\x00(N\x88\x89K\x00K\x01K\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\xff\xff\xff\xffJ\x00\x00\x00\x80J\xff\xff\xff\x7f\x8a\x05\x00\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0G?\xf8\x00\x00\x00\x00\x00\x00G\x80\x00\x00\x00\x00\x00\x00\x00G\x7f\xf0\x00\x00\x00\x00\x00\x00GT\xb2I\xad%\x94\xc3}e.",
        expected: r#"[null,true,false,0,1,255,256,65535,65536,-1,-2147483648,2147483647,2147483648,9223372036854775807,-9223372036854775808,{"bigint":"000000000000008000"},{"bigint":"ffffffffffffff7fff"},{"bigint":"000000000000000040"},{"bigint":"0000000000000000c0"},{"float":"3ff8000000000000"},{"float":"8000000000000000"},{"float":"7ff0000000000000"},{"float":"54b249ad2594c37d"}]"#,
    },
    Golden {
        name: "text_p2",
        // pickle.dumps(['', 'abc', 'caf\xe9 \u20ac \U0001f600 back\\slash\nnewline\r\x00\x1a', b'', b'\x00\xff', bytearray(b'ab')], protocol=2)
        bytes: b"\x80\x02]q\x00(X\x00\x00\x00\x00q\x01X\x03\x00\x00\x00abcq\x02X$\x00\x00\x00caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash\nnewline\x0d\x00\x1aq\x03c__builtin__\nbytes\nq\x04)Rq\x05c_codecs\nencode\nq\x06X\x03\x00\x00\x00\x00\xc3\xbfq\x07X\x06\x00\x00\x00latin1q\x08\x86q\x09Rq\nc__builtin__\nbytearray\nq\x0bh\x06X\x02\x00\x00\x00abq\x0ch\x08\x86q\x0dRq\x0e\x85q\x0fRq\x10e.",
        expected: r#"["","abc","caf\u00e9 \u20ac \ud83d\ude00 back\\slash\nnewline\r\u0000\u001a",{"call":{"global":["builtins","bytes"]},"how":"reduce","args":{"tuple":[]}},{"call":{"global":["_codecs","encode"]},"how":"reduce","args":{"tuple":["\u0000\u00ff","latin1"]}},{"call":{"global":["builtins","bytearray"]},"how":"reduce","args":{"tuple":[{"call":{"global":["_codecs","encode"]},"how":"reduce","args":{"tuple":["ab","latin1"]}}]}}]"#,
    },
    Golden {
        name: "containers_p2",
        // pickle.dumps([(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()], protocol=2)
        bytes: b"\x80\x02]q\x00()K\x01\x85q\x01K\x01K\x02\x86q\x02K\x01K\x02K\x03\x87q\x03(K\x01K\x02K\x03K\x04tq\x04]q\x05]q\x06K\x01a]q\x07(K\x01K\x02e}q\x08}q\x09X\x01\x00\x00\x00aq\nK\x01s}q\x0b(h\nK\x01X\x01\x00\x00\x00bq\x0c]q\x0dK\x02auc__builtin__\nset\nq\x0e]q\x0f(K\x01K\x02e\x85q\x10Rq\x11c__builtin__\nfrozenset\nq\x12]q\x13K\x03a\x85q\x14Rq\x15h\x0e]q\x16\x85q\x17Rq\x18e.",
        expected: r#"[{"tuple":[]},{"tuple":[1]},{"tuple":[1,2]},{"tuple":[1,2,3]},{"tuple":[1,2,3,4]},[],[1],[1,2],{"dict":[]},{"dict":[["a",1]]},{"dict":[["a",1],["b",[2]]]},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[1,2]]}},{"call":{"global":["builtins","frozenset"]},"how":"reduce","args":{"tuple":[[3]]}},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[]]}}]"#,
    },
    Golden {
        name: "objects_p2",
        // pickle.dumps([collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()], protocol=2)
        bytes: b"\x80\x02]q\x00(ccollections\nOrderedDict\nq\x01)Rq\x02(X\x01\x00\x00\x00aq\x03K\x01X\x01\x00\x00\x00bq\x04K\x02uc__main__\nPlain\nq\x05)\x81q\x06}q\x07h\x03K\x01sbc__main__\nMyList\nq\x08)\x81q\x09(K\x01K\x02e}q\nX\x03\x00\x00\x00tagq\x0bX\x01\x00\x00\x00xq\x0csbc__main__\nMyDict\nq\x0d)\x81q\x0eh\x03K\x01s}q\x0fh\x0bX\x01\x00\x00\x00yq\x10sbcfunctools\npartial\nq\x11c__builtin__\ngetattr\nq\x12c__main__\nWithKw\nq\x13X\x07\x00\x00\x00__new__q\x14\x86q\x15Rq\x16\x85q\x17Rq\x18(h\x16h\x13K\x01\x86q\x19}q\x1aX\x01\x00\x00\x00kq\x1bK\x02sNtq\x1cb)Rq\x1de.",
        expected: r#"[{"call":{"global":["collections","OrderedDict"]},"how":"reduce","args":{"tuple":[]},"dict_items":[["a",1],["b",2]]},{"call":{"global":["__main__","Plain"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["a",1]]}},{"call":{"global":["__main__","MyList"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","x"]]},"list_items":[1,2]},{"call":{"global":["__main__","MyDict"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","y"]]},"dict_items":[["a",1]]},{"call":{"call":{"global":["functools","partial"]},"how":"reduce","args":{"tuple":[{"call":{"global":["builtins","getattr"]},"how":"reduce","args":{"tuple":[{"global":["__main__","WithKw"]},"__new__"]}}]},"state":{"tuple":[{"call":{"global":["builtins","getattr"]},"how":"reduce","args":{"tuple":[{"global":["__main__","WithKw"]},"__new__"]}},{"tuple":[{"global":["__main__","WithKw"]},1]},{"dict":[["k",2]]},null]}},"how":"reduce","args":{"tuple":[]}}]"#,
    },
    Golden {
        name: "memo_p2",
        // pickle.dumps((lambda s: (s, s, [s]))([1]), protocol=2)
        bytes: b"\x80\x02]q\x00K\x01ah\x00]q\x01h\x00a\x87q\x02.",
        expected: r#"{"tuple":[[1],[1],[[1]]]}"#,
    },
    Golden {
        name: "cycle_p2",
        // pickle.dumps((lambda l: (l.append(l), l)[1])([]), protocol=2)
        bytes: b"\x80\x02]q\x00h\x00a.",
        expected: r#"[{"cycle":null}]"#,
    },
    Golden {
        name: "recursive_tuple_p2",
        // pickle.dumps((lambda l: (l.append((l,)), l[0])[1])([]), protocol=2)
        bytes: b"\x80\x02]q\x00h\x00\x85q\x01a0h\x01.",
        expected: r#"{"tuple":[[{"cycle":null}]]}"#,
    },
    Golden {
        name: "persistent_p2",
        // PidPickler(f, 2).dump([storage(), storage()]); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)
        bytes: b"\x80\x02]q\x00((X\x07\x00\x00\x00storageq\x01X\x04\x00\x00\x00key0q\x02X\x03\x00\x00\x00cpuq\x03K\x04tq\x04Qh\x04Qe.",
        expected: r#"[{"persid":{"tuple":["storage","key0","cpu",4]}},{"persid":{"tuple":["storage","key0","cpu",4]}}]"#,
    },
    Golden {
        name: "scalars_p3",
        // pickle.dumps([None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100], protocol=3)
        bytes: b"\x80\x03]q\x00(N\x88\x89K\x00K\x01K\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\xff\xff\xff\xffJ\x00\x00\x00\x80J\xff\xff\xff\x7f\x8a\x05\x00\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0G?\xf8\x00\x00\x00\x00\x00\x00G\x80\x00\x00\x00\x00\x00\x00\x00G\x7f\xf0\x00\x00\x00\x00\x00\x00GT\xb2I\xad%\x94\xc3}e.",
        expected: r#"[null,true,false,0,1,255,256,65535,65536,-1,-2147483648,2147483647,2147483648,9223372036854775807,-9223372036854775808,{"bigint":"000000000000008000"},{"bigint":"ffffffffffffff7fff"},{"bigint":"000000000000000040"},{"bigint":"0000000000000000c0"},{"float":"3ff8000000000000"},{"float":"8000000000000000"},{"float":"7ff0000000000000"},{"float":"54b249ad2594c37d"}]"#,
    },
    Golden {
        name: "text_p3",
        // pickle.dumps(['', 'abc', 'caf\xe9 \u20ac \U0001f600 back\\slash\nnewline\r\x00\x1a', b'', b'\x00\xff', bytearray(b'ab')], protocol=3)
        bytes: b"\x80\x03]q\x00(X\x00\x00\x00\x00q\x01X\x03\x00\x00\x00abcq\x02X$\x00\x00\x00caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash\nnewline\x0d\x00\x1aq\x03C\x00q\x04C\x02\x00\xffq\x05cbuiltins\nbytearray\nq\x06C\x02abq\x07\x85q\x08Rq\x09e.",
        expected: r#"["","abc","caf\u00e9 \u20ac \ud83d\ude00 back\\slash\nnewline\r\u0000\u001a",{"bytes":""},{"bytes":"00ff"},{"call":{"global":["builtins","bytearray"]},"how":"reduce","args":{"tuple":[{"bytes":"6162"}]}}]"#,
    },
    Golden {
        name: "containers_p3",
        // pickle.dumps([(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()], protocol=3)
        bytes: b"\x80\x03]q\x00()K\x01\x85q\x01K\x01K\x02\x86q\x02K\x01K\x02K\x03\x87q\x03(K\x01K\x02K\x03K\x04tq\x04]q\x05]q\x06K\x01a]q\x07(K\x01K\x02e}q\x08}q\x09X\x01\x00\x00\x00aq\nK\x01s}q\x0b(h\nK\x01X\x01\x00\x00\x00bq\x0c]q\x0dK\x02aucbuiltins\nset\nq\x0e]q\x0f(K\x01K\x02e\x85q\x10Rq\x11cbuiltins\nfrozenset\nq\x12]q\x13K\x03a\x85q\x14Rq\x15h\x0e]q\x16\x85q\x17Rq\x18e.",
        expected: r#"[{"tuple":[]},{"tuple":[1]},{"tuple":[1,2]},{"tuple":[1,2,3]},{"tuple":[1,2,3,4]},[],[1],[1,2],{"dict":[]},{"dict":[["a",1]]},{"dict":[["a",1],["b",[2]]]},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[1,2]]}},{"call":{"global":["builtins","frozenset"]},"how":"reduce","args":{"tuple":[[3]]}},{"call":{"global":["builtins","set"]},"how":"reduce","args":{"tuple":[[]]}}]"#,
    },
    Golden {
        name: "objects_p3",
        // pickle.dumps([collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()], protocol=3)
        bytes: b"\x80\x03]q\x00(ccollections\nOrderedDict\nq\x01)Rq\x02(X\x01\x00\x00\x00aq\x03K\x01X\x01\x00\x00\x00bq\x04K\x02uc__main__\nPlain\nq\x05)\x81q\x06}q\x07h\x03K\x01sbc__main__\nMyList\nq\x08)\x81q\x09(K\x01K\x02e}q\nX\x03\x00\x00\x00tagq\x0bX\x01\x00\x00\x00xq\x0csbc__main__\nMyDict\nq\x0d)\x81q\x0eh\x03K\x01s}q\x0fh\x0bX\x01\x00\x00\x00yq\x10sbcfunctools\npartial\nq\x11cbuiltins\ngetattr\nq\x12c__main__\nWithKw\nq\x13X\x07\x00\x00\x00__new__q\x14\x86q\x15Rq\x16\x85q\x17Rq\x18(h\x16h\x13K\x01\x86q\x19}q\x1aX\x01\x00\x00\x00kq\x1bK\x02sNtq\x1cb)Rq\x1de.",
        expected: r#"[{"call":{"global":["collections","OrderedDict"]},"how":"reduce","args":{"tuple":[]},"dict_items":[["a",1],["b",2]]},{"call":{"global":["__main__","Plain"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["a",1]]}},{"call":{"global":["__main__","MyList"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","x"]]},"list_items":[1,2]},{"call":{"global":["__main__","MyDict"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","y"]]},"dict_items":[["a",1]]},{"call":{"call":{"global":["functools","partial"]},"how":"reduce","args":{"tuple":[{"call":{"global":["builtins","getattr"]},"how":"reduce","args":{"tuple":[{"global":["__main__","WithKw"]},"__new__"]}}]},"state":{"tuple":[{"call":{"global":["builtins","getattr"]},"how":"reduce","args":{"tuple":[{"global":["__main__","WithKw"]},"__new__"]}},{"tuple":[{"global":["__main__","WithKw"]},1]},{"dict":[["k",2]]},null]}},"how":"reduce","args":{"tuple":[]}}]"#,
    },
    Golden {
        name: "memo_p3",
        // pickle.dumps((lambda s: (s, s, [s]))([1]), protocol=3)
        bytes: b"\x80\x03]q\x00K\x01ah\x00]q\x01h\x00a\x87q\x02.",
        expected: r#"{"tuple":[[1],[1],[[1]]]}"#,
    },
    Golden {
        name: "cycle_p3",
        // pickle.dumps((lambda l: (l.append(l), l)[1])([]), protocol=3)
        bytes: b"\x80\x03]q\x00h\x00a.",
        expected: r#"[{"cycle":null}]"#,
    },
    Golden {
        name: "recursive_tuple_p3",
        // pickle.dumps((lambda l: (l.append((l,)), l[0])[1])([]), protocol=3)
        bytes: b"\x80\x03]q\x00h\x00\x85q\x01a0h\x01.",
        expected: r#"{"tuple":[[{"cycle":null}]]}"#,
    },
    Golden {
        name: "persistent_p3",
        // PidPickler(f, 3).dump([storage(), storage()]); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)
        bytes: b"\x80\x03]q\x00((X\x07\x00\x00\x00storageq\x01X\x04\x00\x00\x00key0q\x02X\x03\x00\x00\x00cpuq\x03K\x04tq\x04Qh\x04Qe.",
        expected: r#"[{"persid":{"tuple":["storage","key0","cpu",4]}},{"persid":{"tuple":["storage","key0","cpu",4]}}]"#,
    },
    Golden {
        name: "scalars_p4",
        // pickle.dumps([None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100], protocol=4)
        bytes: b"\x80\x04\x95\x93\x00\x00\x00\x00\x00\x00\x00]\x94(N\x88\x89K\x00K\x01K\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\xff\xff\xff\xffJ\x00\x00\x00\x80J\xff\xff\xff\x7f\x8a\x05\x00\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0G?\xf8\x00\x00\x00\x00\x00\x00G\x80\x00\x00\x00\x00\x00\x00\x00G\x7f\xf0\x00\x00\x00\x00\x00\x00GT\xb2I\xad%\x94\xc3}e.",
        expected: r#"[null,true,false,0,1,255,256,65535,65536,-1,-2147483648,2147483647,2147483648,9223372036854775807,-9223372036854775808,{"bigint":"000000000000008000"},{"bigint":"ffffffffffffff7fff"},{"bigint":"000000000000000040"},{"bigint":"0000000000000000c0"},{"float":"3ff8000000000000"},{"float":"8000000000000000"},{"float":"7ff0000000000000"},{"float":"54b249ad2594c37d"}]"#,
    },
    Golden {
        name: "text_p4",
        // pickle.dumps(['', 'abc', 'caf\xe9 \u20ac \U0001f600 back\\slash\nnewline\r\x00\x1a', b'', b'\x00\xff', bytearray(b'ab')], protocol=4)
        bytes: b"\x80\x04\x95_\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x00\x94\x8c\x03abc\x94\x8c$caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash\nnewline\x0d\x00\x1a\x94C\x00\x94C\x02\x00\xff\x94\x8c\x08builtins\x94\x8c\x09bytearray\x94\x93\x94C\x02ab\x94\x85\x94R\x94e.",
        expected: r#"["","abc","caf\u00e9 \u20ac \ud83d\ude00 back\\slash\nnewline\r\u0000\u001a",{"bytes":""},{"bytes":"00ff"},{"call":{"global":["builtins","bytearray"]},"how":"reduce","args":{"tuple":[{"bytes":"6162"}]}}]"#,
    },
    Golden {
        name: "containers_p4",
        // pickle.dumps([(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()], protocol=4)
        bytes: b"\x80\x04\x95]\x00\x00\x00\x00\x00\x00\x00]\x94()K\x01\x85\x94K\x01K\x02\x86\x94K\x01K\x02K\x03\x87\x94(K\x01K\x02K\x03K\x04t\x94]\x94]\x94K\x01a]\x94(K\x01K\x02e}\x94}\x94\x8c\x01a\x94K\x01s}\x94(h\nK\x01\x8c\x01b\x94]\x94K\x02au\x8f\x94(K\x01K\x02\x90(K\x03\x91\x94\x8f\x94e.",
        expected: r#"[{"tuple":[]},{"tuple":[1]},{"tuple":[1,2]},{"tuple":[1,2,3]},{"tuple":[1,2,3,4]},[],[1],[1,2],{"dict":[]},{"dict":[["a",1]]},{"dict":[["a",1],["b",[2]]]},{"set":[1,2]},{"frozenset":[3]},{"set":[]}]"#,
    },
    Golden {
        name: "objects_p4",
        // pickle.dumps([collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()], protocol=4)
        bytes: b"\x80\x04\x95\xb3\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94K\x02u\x8c\x08__main__\x94\x8c\x05Plain\x94\x93\x94)\x81\x94}\x94h\x05K\x01sbh\x07\x8c\x06MyList\x94\x93\x94)\x81\x94(K\x01K\x02e}\x94\x8c\x03tag\x94\x8c\x01x\x94sbh\x07\x8c\x06MyDict\x94\x93\x94)\x81\x94h\x05K\x01s}\x94h\x10\x8c\x01y\x94sbh\x07\x8c\x06WithKw\x94\x93\x94K\x01\x85\x94}\x94\x8c\x01k\x94K\x02s\x92\x94e.",
        expected: r#"[{"call":{"global":["collections","OrderedDict"]},"how":"reduce","args":{"tuple":[]},"dict_items":[["a",1],["b",2]]},{"call":{"global":["__main__","Plain"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["a",1]]}},{"call":{"global":["__main__","MyList"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","x"]]},"list_items":[1,2]},{"call":{"global":["__main__","MyDict"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","y"]]},"dict_items":[["a",1]]},{"call":{"global":["__main__","WithKw"]},"how":"newobj_ex","args":{"tuple":[1]},"kwargs":{"dict":[["k",2]]}}]"#,
    },
    Golden {
        name: "memo_p4",
        // pickle.dumps((lambda s: (s, s, [s]))([1]), protocol=4)
        bytes: b"\x80\x04\x95\x0f\x00\x00\x00\x00\x00\x00\x00]\x94K\x01ah\x00]\x94h\x00a\x87\x94.",
        expected: r#"{"tuple":[[1],[1],[[1]]]}"#,
    },
    Golden {
        name: "cycle_p4",
        // pickle.dumps((lambda l: (l.append(l), l)[1])([]), protocol=4)
        bytes: b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94h\x00a.",
        expected: r#"[{"cycle":null}]"#,
    },
    Golden {
        name: "recursive_tuple_p4",
        // pickle.dumps((lambda l: (l.append((l,)), l[0])[1])([]), protocol=4)
        bytes: b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94h\x00\x85\x94a0h\x01.",
        expected: r#"{"tuple":[[{"cycle":null}]]}"#,
    },
    Golden {
        name: "persistent_p4",
        // PidPickler(f, 4).dump([storage(), storage()]); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)
        bytes: b"\x80\x04\x95%\x00\x00\x00\x00\x00\x00\x00]\x94((\x8c\x07storage\x94\x8c\x04key0\x94\x8c\x03cpu\x94K\x04t\x94Qh\x04Qe.",
        expected: r#"[{"persid":{"tuple":["storage","key0","cpu",4]}},{"persid":{"tuple":["storage","key0","cpu",4]}}]"#,
    },
    Golden {
        name: "scalars_p5",
        // pickle.dumps([None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100], protocol=5)
        bytes: b"\x80\x05\x95\x93\x00\x00\x00\x00\x00\x00\x00]\x94(N\x88\x89K\x00K\x01K\xffM\x00\x01M\xff\xffJ\x00\x00\x01\x00J\xff\xff\xff\xffJ\x00\x00\x00\x80J\xff\xff\xff\x7f\x8a\x05\x00\x00\x00\x80\x00\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00@\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0G?\xf8\x00\x00\x00\x00\x00\x00G\x80\x00\x00\x00\x00\x00\x00\x00G\x7f\xf0\x00\x00\x00\x00\x00\x00GT\xb2I\xad%\x94\xc3}e.",
        expected: r#"[null,true,false,0,1,255,256,65535,65536,-1,-2147483648,2147483647,2147483648,9223372036854775807,-9223372036854775808,{"bigint":"000000000000008000"},{"bigint":"ffffffffffffff7fff"},{"bigint":"000000000000000040"},{"bigint":"0000000000000000c0"},{"float":"3ff8000000000000"},{"float":"8000000000000000"},{"float":"7ff0000000000000"},{"float":"54b249ad2594c37d"}]"#,
    },
    Golden {
        name: "text_p5",
        // pickle.dumps(['', 'abc', 'caf\xe9 \u20ac \U0001f600 back\\slash\nnewline\r\x00\x1a', b'', b'\x00\xff', bytearray(b'ab')], protocol=5)
        bytes: b"\x80\x05\x95I\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x00\x94\x8c\x03abc\x94\x8c$caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash\nnewline\x0d\x00\x1a\x94C\x00\x94C\x02\x00\xff\x94\x96\x02\x00\x00\x00\x00\x00\x00\x00ab\x94e.",
        expected: r#"["","abc","caf\u00e9 \u20ac \ud83d\ude00 back\\slash\nnewline\r\u0000\u001a",{"bytes":""},{"bytes":"00ff"},{"bytearray":"6162"}]"#,
    },
    Golden {
        name: "containers_p5",
        // pickle.dumps([(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()], protocol=5)
        bytes: b"\x80\x05\x95]\x00\x00\x00\x00\x00\x00\x00]\x94()K\x01\x85\x94K\x01K\x02\x86\x94K\x01K\x02K\x03\x87\x94(K\x01K\x02K\x03K\x04t\x94]\x94]\x94K\x01a]\x94(K\x01K\x02e}\x94}\x94\x8c\x01a\x94K\x01s}\x94(h\nK\x01\x8c\x01b\x94]\x94K\x02au\x8f\x94(K\x01K\x02\x90(K\x03\x91\x94\x8f\x94e.",
        expected: r#"[{"tuple":[]},{"tuple":[1]},{"tuple":[1,2]},{"tuple":[1,2,3]},{"tuple":[1,2,3,4]},[],[1],[1,2],{"dict":[]},{"dict":[["a",1]]},{"dict":[["a",1],["b",[2]]]},{"set":[1,2]},{"frozenset":[3]},{"set":[]}]"#,
    },
    Golden {
        name: "objects_p5",
        // pickle.dumps([collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()], protocol=5)
        bytes: b"\x80\x05\x95\xb3\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94K\x02u\x8c\x08__main__\x94\x8c\x05Plain\x94\x93\x94)\x81\x94}\x94h\x05K\x01sbh\x07\x8c\x06MyList\x94\x93\x94)\x81\x94(K\x01K\x02e}\x94\x8c\x03tag\x94\x8c\x01x\x94sbh\x07\x8c\x06MyDict\x94\x93\x94)\x81\x94h\x05K\x01s}\x94h\x10\x8c\x01y\x94sbh\x07\x8c\x06WithKw\x94\x93\x94K\x01\x85\x94}\x94\x8c\x01k\x94K\x02s\x92\x94e.",
        expected: r#"[{"call":{"global":["collections","OrderedDict"]},"how":"reduce","args":{"tuple":[]},"dict_items":[["a",1],["b",2]]},{"call":{"global":["__main__","Plain"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["a",1]]}},{"call":{"global":["__main__","MyList"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","x"]]},"list_items":[1,2]},{"call":{"global":["__main__","MyDict"]},"how":"newobj","args":{"tuple":[]},"state":{"dict":[["tag","y"]]},"dict_items":[["a",1]]},{"call":{"global":["__main__","WithKw"]},"how":"newobj_ex","args":{"tuple":[1]},"kwargs":{"dict":[["k",2]]}}]"#,
    },
    Golden {
        name: "memo_p5",
        // pickle.dumps((lambda s: (s, s, [s]))([1]), protocol=5)
        bytes: b"\x80\x05\x95\x0f\x00\x00\x00\x00\x00\x00\x00]\x94K\x01ah\x00]\x94h\x00a\x87\x94.",
        expected: r#"{"tuple":[[1],[1],[[1]]]}"#,
    },
    Golden {
        name: "cycle_p5",
        // pickle.dumps((lambda l: (l.append(l), l)[1])([]), protocol=5)
        bytes: b"\x80\x05\x95\x06\x00\x00\x00\x00\x00\x00\x00]\x94h\x00a.",
        expected: r#"[{"cycle":null}]"#,
    },
    Golden {
        name: "recursive_tuple_p5",
        // pickle.dumps((lambda l: (l.append((l,)), l[0])[1])([]), protocol=5)
        bytes: b"\x80\x05\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94h\x00\x85\x94a0h\x01.",
        expected: r#"{"tuple":[[{"cycle":null}]]}"#,
    },
    Golden {
        name: "persistent_p5",
        // PidPickler(f, 5).dump([storage(), storage()]); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)
        bytes: b"\x80\x05\x95%\x00\x00\x00\x00\x00\x00\x00]\x94((\x8c\x07storage\x94\x8c\x04key0\x94\x8c\x03cpu\x94K\x04t\x94Qh\x04Qe.",
        expected: r#"[{"persid":{"tuple":["storage","key0","cpu",4]}},{"persid":{"tuple":["storage","key0","cpu",4]}}]"#,
    },
    Golden {
        name: "long_text_p3",
        // pickle.dumps(['x' * 256, b'y' * 256], protocol=3)
        bytes: b"\x80\x03]q\x00(X\x00\x01\x00\x00xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxq\x01B\x00\x01\x00\x00yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyq\x02e.",
        expected: r#"["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",{"bytes":"79797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"}]"#,
    },
    Golden {
        name: "long_text_p4",
        // pickle.dumps(['x' * 256, b'y' * 256], protocol=4)
        bytes: b"\x80\x04\x95\x11\x02\x00\x00\x00\x00\x00\x00]\x94(X\x00\x01\x00\x00xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\x94B\x00\x01\x00\x00yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\x94e.",
        expected: r#"["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",{"bytes":"79797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979797979"}]"#,
    },
    Golden {
        name: "long_memo_p1",
        // pickle.dumps((lambda ls: ls + [ls[-1]])([[] for _ in range(260)]), protocol=1)
        bytes: b"]q\x00(]q\x01]q\x02]q\x03]q\x04]q\x05]q\x06]q\x07]q\x08]q\x09]q\n]q\x0b]q\x0c]q\x0d]q\x0e]q\x0f]q\x10]q\x11]q\x12]q\x13]q\x14]q\x15]q\x16]q\x17]q\x18]q\x19]q\x1a]q\x1b]q\x1c]q\x1d]q\x1e]q\x1f]q ]q!]q\"]q#]q$]q%]q&]q']q(]q)]q*]q+]q,]q-]q.]q/]q0]q1]q2]q3]q4]q5]q6]q7]q8]q9]q:]q;]q<]q=]q>]q?]q@]qA]qB]qC]qD]qE]qF]qG]qH]qI]qJ]qK]qL]qM]qN]qO]qP]qQ]qR]qS]qT]qU]qV]qW]qX]qY]qZ]q[]q\\]q]]q^]q_]q`]qa]qb]qc]qd]qe]qf]qg]qh]qi]qj]qk]ql]qm]qn]qo]qp]qq]qr]qs]qt]qu]qv]qw]qx]qy]qz]q{]q|]q}]q~]q\x7f]q\x80]q\x81]q\x82]q\x83]q\x84]q\x85]q\x86]q\x87]q\x88]q\x89]q\x8a]q\x8b]q\x8c]q\x8d]q\x8e]q\x8f]q\x90]q\x91]q\x92]q\x93]q\x94]q\x95]q\x96]q\x97]q\x98]q\x99]q\x9a]q\x9b]q\x9c]q\x9d]q\x9e]q\x9f]q\xa0]q\xa1]q\xa2]q\xa3]q\xa4]q\xa5]q\xa6]q\xa7]q\xa8]q\xa9]q\xaa]q\xab]q\xac]q\xad]q\xae]q\xaf]q\xb0]q\xb1]q\xb2]q\xb3]q\xb4]q\xb5]q\xb6]q\xb7]q\xb8]q\xb9]q\xba]q\xbb]q\xbc]q\xbd]q\xbe]q\xbf]q\xc0]q\xc1]q\xc2]q\xc3]q\xc4]q\xc5]q\xc6]q\xc7]q\xc8]q\xc9]q\xca]q\xcb]q\xcc]q\xcd]q\xce]q\xcf]q\xd0]q\xd1]q\xd2]q\xd3]q\xd4]q\xd5]q\xd6]q\xd7]q\xd8]q\xd9]q\xda]q\xdb]q\xdc]q\xdd]q\xde]q\xdf]q\xe0]q\xe1]q\xe2]q\xe3]q\xe4]q\xe5]q\xe6]q\xe7]q\xe8]q\xe9]q\xea]q\xeb]q\xec]q\xed]q\xee]q\xef]q\xf0]q\xf1]q\xf2]q\xf3]q\xf4]q\xf5]q\xf6]q\xf7]q\xf8]q\xf9]q\xfa]q\xfb]q\xfc]q\xfd]q\xfe]q\xff]r\x00\x01\x00\x00]r\x01\x01\x00\x00]r\x02\x01\x00\x00]r\x03\x01\x00\x00]r\x04\x01\x00\x00j\x04\x01\x00\x00e.",
        expected: r#"[[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[]]"#,
    },
    Golden {
        name: "long_memo_p4",
        // pickle.dumps((lambda ls: ls + [ls[-1]])([[] for _ in range(260)]), protocol=4)
        bytes: b"\x80\x04\x95\x12\x02\x00\x00\x00\x00\x00\x00]\x94(]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94]\x94j\x04\x01\x00\x00e.",
        expected: r#"[[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[],[]]"#,
    },
    Golden {
        name: "big_long_p2",
        // pickle.dumps([-2**2048], protocol=2)
        bytes: b"\x80\x02]q\x00\x8b\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xffa.",
        expected: r#"[{"bigint":"00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000ff"}]"#,
    },
    Golden {
        name: "py2_string_p0",
        // Python 2: pickle.dumps({'a': 'b\'c\n'}, 0)
        bytes: b"(dp0\nS'a'\np1\nS'b\\'c\\n'\np2\ns.",
        expected: r#"{"dict":[["a","b'c\n"]]}"#,
    },
    Golden {
        name: "py2_string_p2",
        // Python 2: pickle.dumps(['abc', 'x' * 3], 2), long form of 'xxx' by hand
        bytes: b"\x80\x02]q\x00(U\x03abcq\x01T\x03\x00\x00\x00xxxq\x02e.",
        expected: r#"["abc","xxx"]"#,
    },
    Golden {
        name: "py2_inst_p0",
        // Python 2: pickle.dumps(C() with c.a = 1, 0), C an old-style class
        bytes: b"(i__main__\nC\np0\n(dp1\nS'a'\np2\nI1\nsb.",
        expected: r#"{"call":{"global":["__main__","C"]},"how":"reduce","args":{"tuple":[]},"state":{"dict":[["a",1]]}}"#,
    },
    Golden {
        name: "py2_obj_p1",
        // Python 2: pickle.dumps(C() with c.a = 1, 1), C an old-style class
        bytes: b"(c__main__\nC\nq\x00o}q\x01U\x01aq\x02K\x01sb.",
        expected: r#"{"call":{"global":["__main__","C"]},"how":"reduce","args":{"tuple":[]},"state":{"dict":[["a",1]]}}"#,
    },
    Golden {
        name: "obj_with_args",
        // by hand: OBJ with arguments, (cls, 1, 2)
        bytes: b"\x80\x02(c__main__\nC\nK\x01K\x02o.",
        expected: r#"{"call":{"global":["__main__","C"]},"how":"reduce","args":{"tuple":[1,2]}}"#,
    },
    Golden {
        name: "dup",
        // by hand: EMPTY_LIST DUP 1 APPEND POP
        bytes: b"\x80\x02]2K\x01a0.",
        expected: r#"[1]"#,
    },
    Golden {
        name: "dict_with_items",
        // by hand: MARK 1 2 3 4 DICT
        bytes: b"(K\x01K\x02K\x03K\x04d.",
        expected: r#"{"dict":[[1,2],[3,4]]}"#,
    },
    Golden {
        name: "binunicode8_binbytes8",
        // by hand: (BINUNICODE8 'abc', BINBYTES8 b'hi')
        bytes: b"\x80\x04\x8d\x03\x00\x00\x00\x00\x00\x00\x00abc\x8e\x02\x00\x00\x00\x00\x00\x00\x00hi\x86.",
        expected: r#"{"tuple":["abc",{"bytes":"6869"}]}"#,
    },
    Golden {
        name: "pop_mark_and_pop",
        // by hand: MARK 1 POP_MARK MARK POP 2
        bytes: b"(K\x011(0K\x02.",
        expected: r#"2"#,
    },
];
