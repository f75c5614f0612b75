//! The Python 2 names of globals, as CPython 3.11's `Lib/_compat_pickle.py`
//! maps them: the decoder reads a protocol 0-2 pickle's names into Python 3
//! ones (`Unpickler.find_class` under `fix_imports`), the encoder writes
//! protocol 2 names the other way (`Pickler.save_global`).
//!
//! The data keeps `_compat_pickle`'s own layout: the pairs CPython reads
//! both ways are written once and looked up from either side, and the
//! additions CPython makes to one direction only stay separate. Every table
//! is sorted by the key it is searched by, for a binary search; the pairs
//! both directions share are sorted by their Python 2 side, since reading
//! is the common direction (torch.save writes protocol 2). Writing finds
//! them through their positions in Python 3 order, worked out on first use,
//! so that each pair is still written down once.

use std::sync::LazyLock;

/// A global's `(module, name)`.
type Name = (&'static str, &'static str);

/// `IMPORT_MAPPING` before its one-way additions, as (Python 2 module,
/// Python 3 module); `REVERSE_IMPORT_MAPPING` is its mirror.
#[rustfmt::skip]
const MODULES: &[(&str, &str)] = &[
    ("BaseHTTPServer", "http.server"),
    ("ConfigParser", "configparser"),
    ("Cookie", "http.cookies"),
    ("Dialog", "tkinter.dialog"),
    ("HTMLParser", "html.parser"),
    ("Queue", "queue"),
    ("ScrolledText", "tkinter.scrolledtext"),
    ("SimpleXMLRPCServer", "xmlrpc.server"),
    ("SocketServer", "socketserver"),
    ("Tix", "tkinter.tix"),
    ("Tkconstants", "tkinter.constants"),
    ("Tkdnd", "tkinter.dnd"),
    ("Tkinter", "tkinter"),
    ("__builtin__", "builtins"),
    ("_abcoll", "collections.abc"),
    ("_winreg", "winreg"),
    ("anydbm", "dbm"),
    ("commands", "subprocess"),
    ("cookielib", "http.cookiejar"),
    ("copy_reg", "copyreg"),
    ("dbhash", "dbm.bsd"),
    ("dbm", "dbm.ndbm"),
    ("dumbdbm", "dbm.dumb"),
    ("dummy_thread", "_dummy_thread"),
    ("gdbm", "dbm.gnu"),
    ("htmlentitydefs", "html.entities"),
    ("httplib", "http.client"),
    ("markupbase", "_markupbase"),
    ("repr", "reprlib"),
    ("robotparser", "urllib.robotparser"),
    ("test.test_support", "test.support"),
    ("thread", "_thread"),
    ("tkColorChooser", "tkinter.colorchooser"),
    ("tkCommonDialog", "tkinter.commondialog"),
    ("tkFileDialog", "tkinter.filedialog"),
    ("tkFont", "tkinter.font"),
    ("tkMessageBox", "tkinter.messagebox"),
    ("tkSimpleDialog", "tkinter.simpledialog"),
    ("ttk", "tkinter.ttk"),
    ("urllib2", "urllib.request"),
    ("urlparse", "urllib.parse"),
    ("xmlrpclib", "xmlrpc.client"),
];

/// `NAME_MAPPING` before its one-way additions, as (Python 2 name,
/// Python 3 name); `REVERSE_NAME_MAPPING` is its mirror.
#[rustfmt::skip]
const NAMES: &[(Name, Name)] = &[
    (("UserDict", "IterableUserDict"), ("collections", "UserDict")),
    (("UserList", "UserList"), ("collections", "UserList")),
    (("UserString", "UserString"), ("collections", "UserString")),
    (("__builtin__", "intern"), ("sys", "intern")),
    (("__builtin__", "long"), ("builtins", "int")),
    (("__builtin__", "reduce"), ("functools", "reduce")),
    (("__builtin__", "unichr"), ("builtins", "chr")),
    (("__builtin__", "unicode"), ("builtins", "str")),
    (("__builtin__", "xrange"), ("builtins", "range")),
    (("_multiprocessing", "Connection"), ("multiprocessing.connection", "Connection")),
    (("_socket", "fromfd"), ("socket", "fromfd")),
    (("itertools", "ifilter"), ("builtins", "filter")),
    (("itertools", "ifilterfalse"), ("itertools", "filterfalse")),
    (("itertools", "imap"), ("builtins", "map")),
    (("itertools", "izip"), ("builtins", "zip")),
    (("itertools", "izip_longest"), ("itertools", "zip_longest")),
    (("multiprocessing.forking", "Popen"), ("multiprocessing.popen_fork", "Popen")),
    (("multiprocessing.process", "Process"), ("multiprocessing.context", "Process")),
    (("urllib", "ContentTooShortError"), ("urllib.error", "ContentTooShortError")),
    (("urllib", "getproxies"), ("urllib.request", "getproxies")),
    (("urllib", "pathname2url"), ("urllib.request", "pathname2url")),
    (("urllib", "quote"), ("urllib.parse", "quote")),
    (("urllib", "quote_plus"), ("urllib.parse", "quote_plus")),
    (("urllib", "unquote"), ("urllib.parse", "unquote")),
    (("urllib", "unquote_plus"), ("urllib.parse", "unquote_plus")),
    (("urllib", "url2pathname"), ("urllib.request", "url2pathname")),
    (("urllib", "urlcleanup"), ("urllib.request", "urlcleanup")),
    (("urllib", "urlencode"), ("urllib.parse", "urlencode")),
    (("urllib", "urlopen"), ("urllib.request", "urlopen")),
    (("urllib", "urlretrieve"), ("urllib.request", "urlretrieve")),
    (("urllib2", "HTTPError"), ("urllib.error", "HTTPError")),
    (("urllib2", "URLError"), ("urllib.error", "URLError")),
    (("whichdb", "whichdb"), ("dbm", "whichdb")),
];

/// `PYTHON2_EXCEPTIONS`: `exceptions.X` in Python 2 is `builtins.X`, both
/// ways.
#[rustfmt::skip]
const PYTHON2_EXCEPTIONS: &[&str] = &[
    "ArithmeticError", "AssertionError", "AttributeError", "BaseException", "BufferError",
    "BytesWarning", "DeprecationWarning", "EOFError", "EnvironmentError", "Exception",
    "FloatingPointError", "FutureWarning", "GeneratorExit", "IOError", "ImportError",
    "ImportWarning", "IndentationError", "IndexError", "KeyError", "KeyboardInterrupt",
    "LookupError", "MemoryError", "NameError", "NotImplementedError", "OSError",
    "OverflowError", "PendingDeprecationWarning", "ReferenceError", "RuntimeError",
    "RuntimeWarning", "StopIteration", "SyntaxError", "SyntaxWarning", "SystemError",
    "SystemExit", "TabError", "TypeError", "UnboundLocalError", "UnicodeDecodeError",
    "UnicodeEncodeError", "UnicodeError", "UnicodeTranslateError", "UnicodeWarning",
    "UserWarning", "ValueError", "Warning", "ZeroDivisionError",
];

/// `MULTIPROCESSING_EXCEPTIONS`: `multiprocessing.X` in Python 2 is
/// `multiprocessing.context.X`, both ways.
const MULTIPROCESSING_EXCEPTIONS: &[&str] = &[
    "AuthenticationError",
    "BufferTooShort",
    "ProcessError",
    "TimeoutError",
];

/// `IMPORT_MAPPING`'s one-way additions: read, never written.
#[rustfmt::skip]
const MODULES_READ_ONLY: &[(&str, &str)] = &[
    ("CGIHTTPServer", "http.server"),
    ("DocXMLRPCServer", "xmlrpc.server"),
    ("FileDialog", "tkinter.filedialog"),
    ("SimpleDialog", "tkinter.simpledialog"),
    ("SimpleHTTPServer", "http.server"),
    ("StringIO", "io"),
    ("UserDict", "collections"),
    ("UserList", "collections"),
    ("UserString", "collections"),
    ("_elementtree", "xml.etree.ElementTree"),
    ("cPickle", "pickle"),
    ("cStringIO", "io"),
    ("whichdb", "dbm"),
];

/// `REVERSE_IMPORT_MAPPING`'s one-way additions, as (Python 3 module,
/// Python 2 module): written, never read.
#[rustfmt::skip]
const MODULES_WRITTEN_ONLY: &[(&str, &str)] = &[
    ("_bz2", "bz2"),
    ("_dbm", "dbm"),
    ("_functools", "functools"),
    ("_gdbm", "gdbm"),
    ("_pickle", "pickle"),
];

/// `NAME_MAPPING`'s one-way additions: read, never written.
#[rustfmt::skip]
const NAMES_READ_ONLY: &[(Name, Name)] = &[
    (("UserDict", "UserDict"), ("collections", "UserDict")),
    (("__builtin__", "basestring"), ("builtins", "str")),
    (("exceptions", "StandardError"), ("builtins", "Exception")),
    (("socket", "_socketobject"), ("socket", "SocketType")),
];

/// `REVERSE_NAME_MAPPING`'s one-way additions, as (Python 3 name, Python 2
/// name): written, never read.
#[rustfmt::skip]
const NAMES_WRITTEN_ONLY: &[(Name, Name)] = &[
    (("_functools", "reduce"), ("__builtin__", "reduce")),
    (("_socket", "socket"), ("socket", "_socketobject")),
    (("http.server", "CGIHTTPRequestHandler"), ("CGIHTTPServer", "CGIHTTPRequestHandler")),
    (("http.server", "SimpleHTTPRequestHandler"), ("SimpleHTTPServer", "SimpleHTTPRequestHandler")),
    (("tkinter.filedialog", "FileDialog"), ("FileDialog", "FileDialog")),
    (("tkinter.filedialog", "LoadFileDialog"), ("FileDialog", "LoadFileDialog")),
    (("tkinter.filedialog", "SaveFileDialog"), ("FileDialog", "SaveFileDialog")),
    (("tkinter.simpledialog", "SimpleDialog"), ("SimpleDialog", "SimpleDialog")),
    (("xmlrpc.server", "DocCGIXMLRPCRequestHandler"), ("DocXMLRPCServer", "DocCGIXMLRPCRequestHandler")),
    (("xmlrpc.server", "DocXMLRPCRequestHandler"), ("DocXMLRPCServer", "DocXMLRPCRequestHandler")),
    (("xmlrpc.server", "DocXMLRPCServer"), ("DocXMLRPCServer", "DocXMLRPCServer")),
    (("xmlrpc.server", "ServerHTMLDoc"), ("DocXMLRPCServer", "ServerHTMLDoc")),
    (("xmlrpc.server", "XMLRPCDocGenerator"), ("DocXMLRPCServer", "XMLRPCDocGenerator")),
];

/// `PYTHON3_OSERROR_EXCEPTIONS` and `PYTHON3_IMPORTERROR_EXCEPTIONS`:
/// `builtins.X` is written as the Python 2 exception it subclasses.
#[rustfmt::skip]
const EXCEPTIONS_WRITTEN_AS: &[(&str, &str)] = &[
    ("BrokenPipeError", "OSError"),
    ("ChildProcessError", "OSError"),
    ("ConnectionAbortedError", "OSError"),
    ("ConnectionError", "OSError"),
    ("ConnectionRefusedError", "OSError"),
    ("ConnectionResetError", "OSError"),
    ("FileExistsError", "OSError"),
    ("FileNotFoundError", "OSError"),
    ("InterruptedError", "OSError"),
    ("IsADirectoryError", "OSError"),
    ("ModuleNotFoundError", "ImportError"),
    ("NotADirectoryError", "OSError"),
    ("PermissionError", "OSError"),
    ("ProcessLookupError", "OSError"),
    ("TimeoutError", "OSError"),
];

/// The positions of [`MODULES`] in the order of their Python 3 side.
static MODULES_BY_PYTHON3: LazyLock<Box<[usize]>> = LazyLock::new(|| by_python3(MODULES));

/// The positions of [`NAMES`] in the order of their Python 3 side.
static NAMES_BY_PYTHON3: LazyLock<Box<[usize]>> = LazyLock::new(|| by_python3(NAMES));

/// The positions of `pairs` in the order of their second, Python 3, side.
fn by_python3<T: Ord>(pairs: &[(T, T)]) -> Box<[usize]> {
    let mut positions: Box<[usize]> = (0..pairs.len()).collect();
    positions.sort_unstable_by_key(|&at| &pairs[at].1);
    positions
}

/// The value `key` maps to in `table`, which is sorted by key.
fn find<K: Ord, V: Copy>(table: &[(K, V)], key: &K) -> Option<V> {
    table
        .binary_search_by(|(candidate, _)| candidate.cmp(key))
        .ok()
        .map(|at| table[at].1)
}

/// The Python 2 side of the pair in `pairs` whose Python 3 side is
/// `python3`, found through `positions`, the pairs in Python 3 order.
fn find_python2<T: Ord + Copy>(pairs: &[(T, T)], positions: &[usize], python3: &T) -> Option<T> {
    positions
        .binary_search_by(|&at| pairs[at].1.cmp(python3))
        .ok()
        .map(|found| pairs[positions[found]].0)
}

/// The global a protocol 0-2 pickle's `module.name` means in Python 3:
/// `NAME_MAPPING`, else `IMPORT_MAPPING` for the module, else unchanged, as
/// `Unpickler.find_class` does when `proto < 3` and `fix_imports` is on.
pub(crate) fn python3_name<'a>(module: &'a str, name: &'a str) -> (&'a str, &'a str) {
    let whole = (module, name);
    let renamed = find(NAMES, &whole)
        .or_else(|| find(NAMES_READ_ONLY, &whole))
        .or_else(|| match module {
            "exceptions" => PYTHON2_EXCEPTIONS
                .binary_search(&name)
                .is_ok()
                .then_some(("builtins", name)),
            "multiprocessing" => MULTIPROCESSING_EXCEPTIONS
                .binary_search(&name)
                .is_ok()
                .then_some(("multiprocessing.context", name)),
            _ => None,
        });
    if let Some(renamed) = renamed {
        return renamed;
    }
    let module = find(MODULES, &module)
        .or_else(|| find(MODULES_READ_ONLY, &module))
        .unwrap_or(module);
    (module, name)
}

/// The global CPython writes for `module.name` at protocol 2 under
/// `fix_imports`: `REVERSE_NAME_MAPPING`, else `REVERSE_IMPORT_MAPPING`
/// for the module, else unchanged, as `Pickler.save_global` does.
pub(crate) fn python2_name<'a>(module: &'a str, name: &'a str) -> (&'a str, &'a str) {
    let whole = (module, name);
    let renamed = find_python2(NAMES, &NAMES_BY_PYTHON3, &whole)
        .or_else(|| find(NAMES_WRITTEN_ONLY, &whole))
        .or_else(|| match module {
            "builtins" => {
                if PYTHON2_EXCEPTIONS.binary_search(&name).is_ok() {
                    Some(("exceptions", name))
                } else {
                    find(EXCEPTIONS_WRITTEN_AS, &name).map(|python2| ("exceptions", python2))
                }
            }
            "multiprocessing.context" => MULTIPROCESSING_EXCEPTIONS
                .binary_search(&name)
                .is_ok()
                .then_some(("multiprocessing", name)),
            _ => None,
        });
    if let Some(renamed) = renamed {
        return renamed;
    }
    let module = find_python2(MODULES, &MODULES_BY_PYTHON3, &module)
        .or_else(|| find(MODULES_WRITTEN_ONLY, &module))
        .unwrap_or(module);
    (module, name)
}

#[cfg(test)]
mod tests;
