"""Generates golden pickles for compat/tests/decode/golden.rs.

Every expected value comes from CPython's own pure-Python unpickler
(pickle._Unpickler) run symbolically: globals (renamed from Python 2 below
protocol 3, as find_class does), calls and persistent ids are recorded
instead of resolved, dicts and sets keep their pickled order. Writes
/tmp/gen/golden_cases.rs, the body of GOLDENS.
"""
import _compat_pickle, collections, copyreg, io, json, os, pickle, pickletools, struct, sys

class Plain:
    def __init__(self):
        self.a = 1

class MyList(list):
    pass

class MyDict(dict):
    pass

class WithKw:
    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)
    def __getnewargs_ex__(self):
        return ((1,), {'k': 2})

class C:  # Python 2 old-style class stand-in for INST / OBJ
    def __init__(self, *args):
        self.args = args

def mylist():
    x = MyList([1, 2]); x.tag = 'x'; return x

def mydict():
    x = MyDict(a=1); x.tag = 'y'; return x

# --- symbolic unpickler -----------------------------------------------------
class G:
    def __init__(self, module, name): self.module, self.name = module, name
class P:
    def __init__(self, pid): self.pid = pid
class Obj:
    def __init__(self, callable, how, args, kwargs=None):
        self.callable, self.how, self.args, self.kwargs = callable, how, args, kwargs
        self.state = None; self.list_items = []; self.dict_items = []
    def append(self, x): self.list_items.append(x)
    def extend(self, xs): self.list_items.extend(xs)
    def __setitem__(self, k, v): self.dict_items.append((k, v))
class D:
    def __init__(self, items=()): self.items = list(items)
    def __setitem__(self, k, v): self.items.append((k, v))
class S:
    def __init__(self, items=()): self.items = list(items)
class FS(S):
    pass

class Symbolic(pickle._Unpickler):
    dispatch = dict(pickle._Unpickler.dispatch)
    def find_class(self, module, name):
        # The renaming of pickle._Unpickler.find_class, without the import.
        if self.proto < 3 and self.fix_imports:
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        return G(module, name)
    def persistent_load(self, pid): return P(pid)
    def _instantiate(self, klass, args): self.append(Obj(klass, 'reduce', tuple(args)))
    def load_reduce(self):
        args = self.stack.pop(); self.stack[-1] = Obj(self.stack[-1], 'reduce', args)
    dispatch[pickle.REDUCE[0]] = load_reduce
    def load_newobj(self):
        args = self.stack.pop(); cls = self.stack.pop(); self.append(Obj(cls, 'newobj', args))
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    def load_newobj_ex(self):
        kwargs = self.stack.pop(); args = self.stack.pop(); cls = self.stack.pop()
        self.append(Obj(cls, 'newobj_ex', args, kwargs))
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    def load_build(self):
        state = self.stack.pop(); inst = self.stack[-1]
        assert isinstance(inst, Obj) and inst.state is None
        inst.state = state
    dispatch[pickle.BUILD[0]] = load_build
    def load_empty_dictionary(self): self.append(D())
    dispatch[pickle.EMPTY_DICT[0]] = load_empty_dictionary
    def load_dict(self):
        items = self.pop_mark(); assert len(items) % 2 == 0
        self.append(D(zip(items[::2], items[1::2])))
    dispatch[pickle.DICT[0]] = load_dict
    def load_empty_set(self): self.append(S())
    dispatch[pickle.EMPTY_SET[0]] = load_empty_set
    def load_frozenset(self):
        items = self.pop_mark(); self.append(FS(items))
    dispatch[pickle.FROZENSET[0]] = load_frozenset
    def load_additems(self):
        items = self.pop_mark(); target = self.stack[-1]
        assert type(target) is S; target.items.extend(items)
    dispatch[pickle.ADDITEMS[0]] = load_additems

def symbolic_load(data):
    u = Symbolic(io.BytesIO(data))
    value = u.load()
    return value

def render(x, path=()):
    if x is None or isinstance(x, (bool, str)): return x
    if isinstance(x, int):
        return x if -2**63 <= x < 2**63 else {"bigint": pickle.encode_long(x).hex()}
    if isinstance(x, float): return {"float": struct.pack('>d', x).hex()}
    if isinstance(x, bytes): return {"bytes": x.hex()}
    if isinstance(x, bytearray): return {"bytearray": bytes(x).hex()}
    if isinstance(x, G): return {"global": [x.module, x.name]}
    if id(x) in path: return {"cycle": None}
    p = path + (id(x),)
    r = lambda v: render(v, p)
    if isinstance(x, tuple): return {"tuple": [r(v) for v in x]}
    if isinstance(x, list): return [r(v) for v in x]
    if isinstance(x, D): return {"dict": [[r(k), r(v)] for k, v in x.items]}
    if isinstance(x, FS): return {"frozenset": [r(v) for v in x.items]}
    if isinstance(x, S): return {"set": [r(v) for v in x.items]}
    if isinstance(x, P): return {"persid": r(x.pid)}
    if isinstance(x, Obj):
        out = {"call": r(x.callable), "how": x.how, "args": r(x.args)}
        if x.how == 'newobj_ex': out["kwargs"] = r(x.kwargs)
        if x.state is not None: out["state"] = r(x.state)
        if x.list_items: out["list_items"] = [r(v) for v in x.list_items]
        if x.dict_items: out["dict_items"] = [[r(k), r(v)] for k, v in x.dict_items]
        return out
    raise TypeError(type(x))

# --- cases ------------------------------------------------------------------
class PidPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Plain) and getattr(obj, 'a', None) == 'storage':
            return 'storage0' if self.protocol == 0 else ('storage', 'key0', 'cpu', 4)
        return None

def storage():
    s = Plain(); s.a = 'storage'; return s

def dumps_pid(obj, proto):
    f = io.BytesIO(); p = PidPickler(f, proto); p.protocol = proto; p.dump(obj); return f.getvalue()

SCALARS = "[None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63, 2**63, -2**63 - 1, 2**70, -2**70, 1.5, -0.0, float('inf'), 1e100]"
TEXT = "['', 'abc', 'caf\\xe9 \\u20ac \\U0001f600 back\\\\slash\\nnewline\\r\\x00\\x1a', b'', b'\\x00\\xff', bytearray(b'ab')]"
LONG_TEXT = "['x' * 256, b'y' * 256]"
CONTAINERS = "[(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], [1], [1, 2], {}, {'a': 1}, {'a': 1, 'b': [2]}, {1, 2}, frozenset({3}), set()]"
OBJECTS = "[collections.OrderedDict([('a', 1), ('b', 2)]), Plain(), mylist(), mydict(), WithKw()]"
MEMO = "(lambda s: (s, s, [s]))([1])"
CYCLE = "(lambda l: (l.append(l), l)[1])([])"
RECURSIVE_TUPLE = "(lambda l: (l.append((l,)), l[0])[1])([])"
LONG_MEMO = "(lambda ls: ls + [ls[-1]])([[] for _ in range(260)])"
BIG_LONG = "[-2**2048]"
PERSISTENT = "[storage(), storage()]"

cases = []
for proto in range(6):
    for name, expr in [('scalars', SCALARS), ('text', TEXT), ('containers', CONTAINERS),
                       ('objects', OBJECTS), ('memo', MEMO), ('cycle', CYCLE),
                       ('recursive_tuple', RECURSIVE_TUPLE)]:
        cases.append((f'{name}_p{proto}', f'pickle.dumps({expr}, protocol={proto})',
                      pickle.dumps(eval(expr), protocol=proto)))
    cases.append((f'persistent_p{proto}', f'PidPickler(f, {proto}).dump({PERSISTENT}); persistent_id gives "storage0" at protocol 0, else ("storage", "key0", "cpu", 4)',
                  dumps_pid(eval(PERSISTENT), proto)))
for proto in (3, 4):
    cases.append((f'long_text_p{proto}', f'pickle.dumps({LONG_TEXT}, protocol={proto})',
                  pickle.dumps(eval(LONG_TEXT), protocol=proto)))
for proto in (1, 4):
    cases.append((f'long_memo_p{proto}', f'pickle.dumps({LONG_MEMO}, protocol={proto})',
                  pickle.dumps(eval(LONG_MEMO), protocol=proto)))
cases.append(('big_long_p2', f'pickle.dumps({BIG_LONG}, protocol=2)', pickle.dumps(eval(BIG_LONG), protocol=2)))

# Opcodes CPython 3's pickler never writes: as Python 2 or a hand wrote them.
hand = [
    ('py2_string_p0', "Python 2: pickle.dumps({'a': 'b\\'c\\n'}, 0)", b"(dp0\nS'a'\np1\nS'b\\'c\\n'\np2\ns."),
    ('py2_string_p2', "Python 2: pickle.dumps(['abc', 'x' * 3], 2), long form of 'xxx' by hand",
     b"\x80\x02]q\x00(U\x03abcq\x01T\x03\x00\x00\x00xxxq\x02e."),
    ('py2_inst_p0', "Python 2: pickle.dumps(C() with c.a = 1, 0), C an old-style class",
     b"(i__main__\nC\np0\n(dp1\nS'a'\np2\nI1\nsb."),
    ('py2_obj_p1', "Python 2: pickle.dumps(C() with c.a = 1, 1), C an old-style class",
     b"(c__main__\nC\nq\x00o}q\x01U\x01aq\x02K\x01sb."),
    ('obj_with_args', "by hand: OBJ with arguments, (cls, 1, 2)", b"\x80\x02(c__main__\nC\nK\x01K\x02o."),
    ('dup', "by hand: EMPTY_LIST DUP 1 APPEND POP", b"\x80\x02]2K\x01a0."),
    ('dict_with_items', "by hand: MARK 1 2 3 4 DICT", b"(K\x01K\x02K\x03K\x04d."),
    ('binunicode8_binbytes8', "by hand: (BINUNICODE8 'abc', BINBYTES8 b'hi')",
     b"\x80\x04\x8d\x03\x00\x00\x00\x00\x00\x00\x00abc\x8e\x02\x00\x00\x00\x00\x00\x00\x00hi\x86."),
    ('pop_mark_and_pop', "by hand: MARK 1 POP_MARK MARK POP 2", b"(K\x011(0K\x02."),
]
cases += hand

covered = set()
out = []
for name, expr, data in cases:
    # The C unpickler accepts every golden.
    u = pickle.Unpickler(io.BytesIO(data)); u.persistent_load = lambda pid: pid; u.load()
    ops = {op.name for op, arg, pos in pickletools.genops(data)}
    covered |= ops
    expected = json.dumps(render(symbolic_load(data)), separators=(',', ':'), ensure_ascii=True)
    out.append((name, expr, data, expected))

all_ops = {op.name for op in pickletools.opcodes}
refused = {'EXT1', 'EXT2', 'EXT4', 'NEXT_BUFFER', 'READONLY_BUFFER'}
print('// missing:', sorted(all_ops - covered - refused), file=sys.stderr)

def rust_bytes(data):
    s = []
    for b in data:
        c = chr(b)
        if c == '"': s.append('\\"')
        elif c == '\\': s.append('\\\\')
        elif c == '\n': s.append('\\n')
        elif 0x20 <= b < 0x7f: s.append(c)
        else: s.append('\\x%02x' % b)
    return 'b"' + ''.join(s) + '"'

os.makedirs('/tmp/gen', exist_ok=True)
with open('/tmp/gen/golden_cases.rs', 'w') as f:
    for name, expr, data, expected in out:
        f.write(f'    Golden {{\n        name: "{name}",\n        // {expr}\n')
        f.write(f'        bytes: {rust_bytes(data)},\n')
        f.write(f'        expected: r#"{expected}"#,\n    }},\n')
print(len(out), 'cases', sum(len(d) for _, _, d, _ in out), 'bytes')
