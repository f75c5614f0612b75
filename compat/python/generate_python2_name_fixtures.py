#!/usr/bin/env python3
"""Writes compat/tests/data/python2_names/: what CPython itself writes under
Python 2 names at protocols 0-2, and what it reads back.

    "$(scripts/python-env)" compat/python/generate_python2_name_fixtures.py

Run with the pinned venv (CPython 3.11 and torch). It writes:

- `<case>_p<N>.pkl`: `pickle.dumps(value, protocol=N)` for every case and
  protocol 0 to 5. At protocols 0-2 CPython names `set`, `frozenset`,
  `bytearray` and empty `bytes` under `__builtin__` (`_compat_pickle`).
- `set_of_names.zip.pt`: `torch.save` (zip; its data.pkl is protocol 2) of a
  dict holding a set of names and a tensor.
- `expected.json`: per pickle, the value `pickle.loads` gives back, in the
  JSON shape `tests/python2_names.rs` renders; per hand-built pickle in
  `by_hand`, whether CPython loads it or the error it raises.
- `compat_pickle.tsv`: CPython's four `_compat_pickle` tables, one entry a
  line, which the unit tests of `compat/src/pickle/python2_names.rs`
  compare against exhaustively.
"""

import _compat_pickle
import collections
import io
import json
import os
import pickle
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, '..', 'tests', 'data', 'python2_names')

CASES = {
    'set': {3, 1, 2},
    'set_empty': set(),
    'frozenset': frozenset({'a', 'b'}),
    'frozenset_empty': frozenset(),
    'bytearray': bytearray(b'\x00\xff\x80a'),
    'bytearray_empty': bytearray(),
    'bytes_empty': b'',
    'bytes_non_utf8': b'\xff\xfe\x00',
    'bytes_ascii': b'abc',
    'nested': {
        'set': {1, 2},
        'frozenset': frozenset({3}),
        'bytearray': bytearray(b'\xfe'),
        'bytes': [b'', b'\x80', b'xy'],
        'ordered': collections.OrderedDict([('k', {4})]),
    },
}

# Hand-built pickles whose protocol decides how a Python 2 name reads:
# find_class maps names only while the protocol in force (set by the last
# PROTO, 0 when there is none) is below 3.
BY_HAND = {
    'python2_set_at_protocol_4': b'\x80\x04c__builtin__\nset\n)R.',
    'python2_set_at_protocol_3': b'\x80\x03c__builtin__\nset\n)R.',
    'python2_set_at_protocol_2': b'\x80\x02c__builtin__\nset\n)R.',
    'python2_set_without_proto': b'c__builtin__\nset\n)R.',
    'python2_set_after_proto_4_then_2': b'\x80\x04\x80\x02c__builtin__\nset\n)R.',
    'python2_set_after_proto_2_then_4': b'\x80\x02\x80\x04c__builtin__\nset\n)R.',
    'python2_set_by_stack_global_p2': b'\x80\x02X\x0b\x00\x00\x00__builtin__X\x03\x00\x00\x00set\x93)R.',
    'python2_bytes_at_protocol_4': b'\x80\x04c__builtin__\nbytes\n)R.',
    'python3_set_at_protocol_2': b'\x80\x02cbuiltins\nset\n)R.',
    'copy_reg_at_protocol_2': b'\x80\x02ccopy_reg\n_reconstructor\n.',
}


def render(value):
    """The JSON shape of a loaded value; sets keep their iteration order,
    which is the order the pickler wrote them in."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, bytes):
        return {'bytes': value.hex()}
    if isinstance(value, bytearray):
        return {'bytearray': bytes(value).hex()}
    if isinstance(value, list):
        return [render(item) for item in value]
    if isinstance(value, tuple):
        return {'tuple': [render(item) for item in value]}
    if isinstance(value, frozenset):
        return {'frozenset': [render(item) for item in value]}
    if isinstance(value, set):
        return {'set': [render(item) for item in value]}
    if isinstance(value, collections.OrderedDict):
        return {'ordered_dict': [[render(k), render(v)] for k, v in value.items()]}
    if isinstance(value, dict):
        return {'dict': [[render(k), render(v)] for k, v in value.items()]}
    if isinstance(value, type) or callable(value):
        return {'global': [value.__module__, value.__qualname__]}
    raise TypeError(type(value))


def outcome(data):
    """What both CPython unpicklers make of `data`; they must agree."""
    results = []
    for loads in (pickle.loads, pickle._loads):
        try:
            results.append({'value': render(loads(data))})
        except Exception as error:
            results.append({'error': f'{type(error).__name__}: {error}'})
    assert results[0] == results[1], results
    return results[0]


def dump_tables(path):
    with open(path, 'w') as f:
        f.write(f'# _compat_pickle of CPython {sys.version.split()[0]}: table, key, value\n')
        tables = [
            ('NAME_MAPPING', _compat_pickle.NAME_MAPPING),
            ('IMPORT_MAPPING', _compat_pickle.IMPORT_MAPPING),
            ('REVERSE_NAME_MAPPING', _compat_pickle.REVERSE_NAME_MAPPING),
            ('REVERSE_IMPORT_MAPPING', _compat_pickle.REVERSE_IMPORT_MAPPING),
        ]
        for table, mapping in tables:
            for key, value in sorted(mapping.items()):
                key = ' '.join(key) if isinstance(key, tuple) else key
                value = ' '.join(value) if isinstance(value, tuple) else value
                f.write(f'{table}\t{key}\t{value}\n')


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {'pickles': {}, 'by_hand': {}}
    for name, value in CASES.items():
        for protocol in range(6):
            data = pickle.dumps(value, protocol=protocol)
            file = f'{name}_p{protocol}.pkl'
            with open(os.path.join(OUT, file), 'wb') as f:
                f.write(data)
            loaded = outcome(data)
            assert loaded == {'value': render(value)}, (file, loaded)
            expected['pickles'][file] = loaded['value']
    for name, data in BY_HAND.items():
        expected['by_hand'][name] = {'hex': data.hex(), **outcome(data)}

    saved = {'names': {'alpha', 'beta', 'gamma'}, 'weight': torch.arange(3, dtype=torch.float32)}
    path = os.path.join(OUT, 'set_of_names.zip.pt')
    torch.save(saved, path)
    loaded = torch.load(path, weights_only=False)
    assert loaded['names'] == saved['names'] and torch.equal(loaded['weight'], saved['weight'])
    expected['set_of_names.zip.pt'] = {
        'names': sorted(saved['names']),
        'weight': saved['weight'].tolist(),
        'torch': torch.__version__,
    }

    with open(os.path.join(OUT, 'expected.json'), 'w') as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write('\n')
    dump_tables(os.path.join(OUT, 'compat_pickle.tsv'))
    print(f'wrote {len(expected["pickles"])} pickles to {os.path.normpath(OUT)}')


if __name__ == '__main__':
    main()
