//! The tables against CPython's own (`compat_pickle.tsv` is `_compat_pickle`
//! dumped by `compat/python/generate_python2_name_fixtures.py`), and in the
//! order their binary searches need.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;

use super::*;

const CPYTHON_TABLES: &str = include_str!("../../../tests/data/python2_names/compat_pickle.tsv");

/// CPython's four tables, keyed as in `_compat_pickle`.
#[derive(Default)]
struct CpythonTables {
    names: HashMap<(String, String), (String, String)>,
    modules: HashMap<String, String>,
    reverse_names: HashMap<(String, String), (String, String)>,
    reverse_modules: HashMap<String, String>,
}

fn pair(text: &str) -> (String, String) {
    let (module, name) = text.split_once(' ').expect("'module name'");
    (module.to_owned(), name.to_owned())
}

fn cpython_tables() -> CpythonTables {
    let mut tables = CpythonTables::default();
    for line in CPYTHON_TABLES.lines().filter(|line| !line.starts_with('#')) {
        let [table, key, value] = line.split('\t').collect::<Vec<_>>()[..] else {
            panic!("bad line {line:?}");
        };
        match table {
            "NAME_MAPPING" => drop(tables.names.insert(pair(key), pair(value))),
            "IMPORT_MAPPING" => drop(tables.modules.insert(key.into(), value.into())),
            "REVERSE_NAME_MAPPING" => drop(tables.reverse_names.insert(pair(key), pair(value))),
            "REVERSE_IMPORT_MAPPING" => {
                drop(tables.reverse_modules.insert(key.into(), value.into()))
            }
            _ => panic!("unknown table {table}"),
        }
    }
    tables
}

/// `find_class`'s renaming (or `save_global`'s, given the reverse tables).
fn rename(
    names: &HashMap<(String, String), (String, String)>,
    modules: &HashMap<String, String>,
    module: &str,
    name: &str,
) -> (String, String) {
    if let Some(renamed) = names.get(&(module.to_owned(), name.to_owned())) {
        return renamed.clone();
    }
    let module = modules.get(module).map_or(module, String::as_str);
    (module.to_owned(), name.to_owned())
}

/// Every module and name either side's tables mention, and one neither does.
fn every_string(cpython: &CpythonTables) -> (BTreeSet<&str>, BTreeSet<&str>) {
    let mut modules = BTreeSet::from(["torch._utils", "collections"]);
    let mut names = BTreeSet::from(["_rebuild_tensor_v2", "OrderedDict", "set"]);
    let cpython_names = cpython.names.iter().chain(&cpython.reverse_names);
    for ((m1, n1), (m2, n2)) in cpython_names {
        modules.extend([m1.as_str(), m2.as_str()]);
        names.extend([n1.as_str(), n2.as_str()]);
    }
    let cpython_modules = cpython.modules.iter().chain(&cpython.reverse_modules);
    for (m1, m2) in cpython_modules {
        modules.extend([m1.as_str(), m2.as_str()]);
    }
    let ours = NAMES
        .iter()
        .chain(NAMES_READ_ONLY)
        .chain(NAMES_WRITTEN_ONLY);
    for &((m1, n1), (m2, n2)) in ours {
        modules.extend([m1, m2]);
        names.extend([n1, n2]);
    }
    for &(m1, m2) in MODULES
        .iter()
        .chain(MODULES_READ_ONLY)
        .chain(MODULES_WRITTEN_ONLY)
    {
        modules.extend([m1, m2]);
    }
    modules.extend([
        "exceptions",
        "builtins",
        "multiprocessing",
        "multiprocessing.context",
    ]);
    names.extend(PYTHON2_EXCEPTIONS);
    names.extend(MULTIPROCESSING_EXCEPTIONS);
    names.extend(EXCEPTIONS_WRITTEN_AS.iter().flat_map(|&(a, b)| [a, b]));
    (modules, names)
}

/// Checks that `keys` strictly increase: sorted, as a binary search needs,
/// and none twice.
fn assert_strictly_increasing<K: Ord + Debug>(table: &str, keys: impl IntoIterator<Item = K>) {
    let keys: Vec<K> = keys.into_iter().collect();
    for pair in keys.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{table}: {:?} before {:?}",
            pair[0],
            pair[1]
        );
    }
}

/// Checks that no key is in two of the tables one direction searches, so
/// that the order it searches them in cannot change an answer.
fn assert_disjoint<K: Ord + Debug>(direction: &str, keys: impl IntoIterator<Item = K>) {
    let mut seen = BTreeSet::new();
    for key in keys {
        let shown = format!("{key:?}");
        assert!(seen.insert(key), "{direction}: {shown} twice");
    }
}

/// A pair's first side: the key of every table but the writing side of
/// the shared ones.
fn first<T: Copy>(&(key, _): &(T, T)) -> T {
    key
}

/// A pair's second side: the key the shared tables are written by.
fn second<T: Copy>(&(_, key): &(T, T)) -> T {
    key
}

#[test]
fn every_table_is_sorted_by_the_key_it_is_searched_by() {
    assert_strictly_increasing("MODULES", MODULES.iter().map(first));
    assert_strictly_increasing("MODULES_READ_ONLY", MODULES_READ_ONLY.iter().map(first));
    assert_strictly_increasing(
        "MODULES_WRITTEN_ONLY",
        MODULES_WRITTEN_ONLY.iter().map(first),
    );
    assert_strictly_increasing("NAMES", NAMES.iter().map(first));
    assert_strictly_increasing("NAMES_READ_ONLY", NAMES_READ_ONLY.iter().map(first));
    assert_strictly_increasing("NAMES_WRITTEN_ONLY", NAMES_WRITTEN_ONLY.iter().map(first));
    assert_strictly_increasing("PYTHON2_EXCEPTIONS", PYTHON2_EXCEPTIONS);
    assert_strictly_increasing("MULTIPROCESSING_EXCEPTIONS", MULTIPROCESSING_EXCEPTIONS);
    assert_strictly_increasing(
        "EXCEPTIONS_WRITTEN_AS",
        EXCEPTIONS_WRITTEN_AS.iter().map(first),
    );
    // Sorted by construction; strictly so only if no two pairs share a
    // Python 3 side, as CPython asserts of its reverse tables.
    assert_strictly_increasing(
        "MODULES by Python 3",
        MODULES_BY_PYTHON3.iter().map(|&at| second(&MODULES[at])),
    );
    assert_strictly_increasing(
        "NAMES by Python 3",
        NAMES_BY_PYTHON3.iter().map(|&at| second(&NAMES[at])),
    );
}

#[test]
fn no_key_is_in_two_tables_of_one_direction() {
    let with_module = |module| move |&name: &&'static str| (module, name);
    assert_disjoint(
        "reading modules",
        MODULES.iter().chain(MODULES_READ_ONLY).map(first),
    );
    assert_disjoint(
        "writing modules",
        MODULES
            .iter()
            .map(second)
            .chain(MODULES_WRITTEN_ONLY.iter().map(first)),
    );
    assert_disjoint(
        "reading names",
        NAMES
            .iter()
            .chain(NAMES_READ_ONLY)
            .map(first)
            .chain(PYTHON2_EXCEPTIONS.iter().map(with_module("exceptions")))
            .chain(
                MULTIPROCESSING_EXCEPTIONS
                    .iter()
                    .map(with_module("multiprocessing")),
            ),
    );
    assert_disjoint(
        "writing names",
        NAMES
            .iter()
            .map(second)
            .chain(NAMES_WRITTEN_ONLY.iter().map(first))
            .chain(PYTHON2_EXCEPTIONS.iter().map(with_module("builtins")))
            .chain(
                EXCEPTIONS_WRITTEN_AS
                    .iter()
                    .map(|&(name, _)| ("builtins", name)),
            )
            .chain(
                MULTIPROCESSING_EXCEPTIONS
                    .iter()
                    .map(with_module("multiprocessing.context")),
            ),
    );
}

#[test]
fn both_directions_rename_every_global_as_cpython_does() {
    let cpython = cpython_tables();
    assert!(cpython.names.len() > 80 && cpython.reverse_modules.len() > 40);
    let (modules, names) = every_string(&cpython);
    for module in &modules {
        for name in &names {
            let read = rename(&cpython.names, &cpython.modules, module, name);
            assert_eq!(
                python3_name(module, name),
                (read.0.as_str(), read.1.as_str()),
                "reading {module}.{name}"
            );
            let written = rename(
                &cpython.reverse_names,
                &cpython.reverse_modules,
                module,
                name,
            );
            assert_eq!(
                python2_name(module, name),
                (written.0.as_str(), written.1.as_str()),
                "writing {module}.{name}"
            );
        }
    }
}

#[test]
fn the_builtins_torch_pickles_use() {
    assert_eq!(python3_name("__builtin__", "set"), ("builtins", "set"));
    assert_eq!(python3_name("__builtin__", "bytes"), ("builtins", "bytes"));
    assert_eq!(python3_name("__builtin__", "xrange"), ("builtins", "range"));
    assert_eq!(
        python3_name("copy_reg", "_reconstructor"),
        ("copyreg", "_reconstructor")
    );
    assert_eq!(python3_name("_codecs", "encode"), ("_codecs", "encode"));
    assert_eq!(python2_name("builtins", "set"), ("__builtin__", "set"));
    assert_eq!(python2_name("builtins", "range"), ("__builtin__", "xrange"));
    assert_eq!(
        python2_name("torch._utils", "_rebuild_tensor_v2"),
        ("torch._utils", "_rebuild_tensor_v2")
    );
}
