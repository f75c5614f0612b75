//! The Python 2 names of globals, as CPython 3.11's `Lib/_compat_pickle.py`
//! maps them: the decoder reads a protocol 0-2 pickle's names into Python 3
//! ones (`Unpickler.find_class` under `fix_imports`), the encoder writes
//! protocol 2 names the other way (`Pickler.save_global`).
//!
//! The data keeps `_compat_pickle`'s own layout: the pairs CPython reads
//! both ways are written once and looked up from either side, and the
//! additions CPython makes to one direction only stay separate. The tables
//! are small and a pickle names each global once (the memo holds it after),
//! so a linear scan costs less than keeping a sorted copy per direction.

/// A global's `(module, name)`.
type Name = (&'static str, &'static str);

/// `IMPORT_MAPPING` before its one-way additions, as (Python 2 module,
/// Python 3 module); `REVERSE_IMPORT_MAPPING` is its mirror.
#[rustfmt::skip]
const MODULES: &[(&str, &str)] = &[
    ("__builtin__", "builtins"),
    ("copy_reg", "copyreg"),
    ("Queue", "queue"),
    ("SocketServer", "socketserver"),
    ("ConfigParser", "configparser"),
    ("repr", "reprlib"),
    ("tkFileDialog", "tkinter.filedialog"),
    ("tkSimpleDialog", "tkinter.simpledialog"),
    ("tkColorChooser", "tkinter.colorchooser"),
    ("tkCommonDialog", "tkinter.commondialog"),
    ("Dialog", "tkinter.dialog"),
    ("Tkdnd", "tkinter.dnd"),
    ("tkFont", "tkinter.font"),
    ("tkMessageBox", "tkinter.messagebox"),
    ("ScrolledText", "tkinter.scrolledtext"),
    ("Tkconstants", "tkinter.constants"),
    ("Tix", "tkinter.tix"),
    ("ttk", "tkinter.ttk"),
    ("Tkinter", "tkinter"),
    ("markupbase", "_markupbase"),
    ("_winreg", "winreg"),
    ("thread", "_thread"),
    ("dummy_thread", "_dummy_thread"),
    ("dbhash", "dbm.bsd"),
    ("dumbdbm", "dbm.dumb"),
    ("dbm", "dbm.ndbm"),
    ("gdbm", "dbm.gnu"),
    ("xmlrpclib", "xmlrpc.client"),
    ("SimpleXMLRPCServer", "xmlrpc.server"),
    ("httplib", "http.client"),
    ("htmlentitydefs", "html.entities"),
    ("HTMLParser", "html.parser"),
    ("Cookie", "http.cookies"),
    ("cookielib", "http.cookiejar"),
    ("BaseHTTPServer", "http.server"),
    ("test.test_support", "test.support"),
    ("commands", "subprocess"),
    ("urlparse", "urllib.parse"),
    ("robotparser", "urllib.robotparser"),
    ("urllib2", "urllib.request"),
    ("anydbm", "dbm"),
    ("_abcoll", "collections.abc"),
];

/// `NAME_MAPPING` before its one-way additions, as (Python 2 name,
/// Python 3 name); `REVERSE_NAME_MAPPING` is its mirror.
#[rustfmt::skip]
const NAMES: &[(Name, Name)] = &[
    (("__builtin__", "xrange"), ("builtins", "range")),
    (("__builtin__", "reduce"), ("functools", "reduce")),
    (("__builtin__", "intern"), ("sys", "intern")),
    (("__builtin__", "unichr"), ("builtins", "chr")),
    (("__builtin__", "unicode"), ("builtins", "str")),
    (("__builtin__", "long"), ("builtins", "int")),
    (("itertools", "izip"), ("builtins", "zip")),
    (("itertools", "imap"), ("builtins", "map")),
    (("itertools", "ifilter"), ("builtins", "filter")),
    (("itertools", "ifilterfalse"), ("itertools", "filterfalse")),
    (("itertools", "izip_longest"), ("itertools", "zip_longest")),
    (("UserDict", "IterableUserDict"), ("collections", "UserDict")),
    (("UserList", "UserList"), ("collections", "UserList")),
    (("UserString", "UserString"), ("collections", "UserString")),
    (("whichdb", "whichdb"), ("dbm", "whichdb")),
    (("_socket", "fromfd"), ("socket", "fromfd")),
    (("_multiprocessing", "Connection"), ("multiprocessing.connection", "Connection")),
    (("multiprocessing.process", "Process"), ("multiprocessing.context", "Process")),
    (("multiprocessing.forking", "Popen"), ("multiprocessing.popen_fork", "Popen")),
    (("urllib", "ContentTooShortError"), ("urllib.error", "ContentTooShortError")),
    (("urllib", "getproxies"), ("urllib.request", "getproxies")),
    (("urllib", "pathname2url"), ("urllib.request", "pathname2url")),
    (("urllib", "quote_plus"), ("urllib.parse", "quote_plus")),
    (("urllib", "quote"), ("urllib.parse", "quote")),
    (("urllib", "unquote_plus"), ("urllib.parse", "unquote_plus")),
    (("urllib", "unquote"), ("urllib.parse", "unquote")),
    (("urllib", "url2pathname"), ("urllib.request", "url2pathname")),
    (("urllib", "urlcleanup"), ("urllib.request", "urlcleanup")),
    (("urllib", "urlencode"), ("urllib.parse", "urlencode")),
    (("urllib", "urlopen"), ("urllib.request", "urlopen")),
    (("urllib", "urlretrieve"), ("urllib.request", "urlretrieve")),
    (("urllib2", "HTTPError"), ("urllib.error", "HTTPError")),
    (("urllib2", "URLError"), ("urllib.error", "URLError")),
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
    ("cPickle", "pickle"),
    ("_elementtree", "xml.etree.ElementTree"),
    ("FileDialog", "tkinter.filedialog"),
    ("SimpleDialog", "tkinter.simpledialog"),
    ("DocXMLRPCServer", "xmlrpc.server"),
    ("SimpleHTTPServer", "http.server"),
    ("CGIHTTPServer", "http.server"),
    ("UserDict", "collections"),
    ("UserList", "collections"),
    ("UserString", "collections"),
    ("whichdb", "dbm"),
    ("StringIO", "io"),
    ("cStringIO", "io"),
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
    (("__builtin__", "basestring"), ("builtins", "str")),
    (("exceptions", "StandardError"), ("builtins", "Exception")),
    (("UserDict", "UserDict"), ("collections", "UserDict")),
    (("socket", "_socketobject"), ("socket", "SocketType")),
];

/// `REVERSE_NAME_MAPPING`'s one-way additions, as (Python 3 name, Python 2
/// name): written, never read.
#[rustfmt::skip]
const NAMES_WRITTEN_ONLY: &[(Name, Name)] = &[
    (("_functools", "reduce"), ("__builtin__", "reduce")),
    (("tkinter.filedialog", "FileDialog"), ("FileDialog", "FileDialog")),
    (("tkinter.filedialog", "LoadFileDialog"), ("FileDialog", "LoadFileDialog")),
    (("tkinter.filedialog", "SaveFileDialog"), ("FileDialog", "SaveFileDialog")),
    (("tkinter.simpledialog", "SimpleDialog"), ("SimpleDialog", "SimpleDialog")),
    (("xmlrpc.server", "ServerHTMLDoc"), ("DocXMLRPCServer", "ServerHTMLDoc")),
    (("xmlrpc.server", "XMLRPCDocGenerator"), ("DocXMLRPCServer", "XMLRPCDocGenerator")),
    (("xmlrpc.server", "DocXMLRPCRequestHandler"), ("DocXMLRPCServer", "DocXMLRPCRequestHandler")),
    (("xmlrpc.server", "DocXMLRPCServer"), ("DocXMLRPCServer", "DocXMLRPCServer")),
    (("xmlrpc.server", "DocCGIXMLRPCRequestHandler"), ("DocXMLRPCServer", "DocCGIXMLRPCRequestHandler")),
    (("http.server", "SimpleHTTPRequestHandler"), ("SimpleHTTPServer", "SimpleHTTPRequestHandler")),
    (("http.server", "CGIHTTPRequestHandler"), ("CGIHTTPServer", "CGIHTTPRequestHandler")),
    (("_socket", "socket"), ("socket", "_socketobject")),
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
    ("NotADirectoryError", "OSError"),
    ("PermissionError", "OSError"),
    ("ProcessLookupError", "OSError"),
    ("TimeoutError", "OSError"),
    ("ModuleNotFoundError", "ImportError"),
];

/// The global a protocol 0-2 pickle's `module.name` means in Python 3:
/// `NAME_MAPPING`, else `IMPORT_MAPPING` for the module, else unchanged, as
/// `Unpickler.find_class` does when `proto < 3` and `fix_imports` is on.
pub(crate) fn python3_name<'a>(module: &'a str, name: &'a str) -> (&'a str, &'a str) {
    let whole = (module, name);
    let renamed = NAMES
        .iter()
        .chain(NAMES_READ_ONLY)
        .find(|(python2, _)| *python2 == whole)
        .map(|&(_, python3)| python3)
        .or_else(|| match module {
            "exceptions" => PYTHON2_EXCEPTIONS
                .iter()
                .find(|&&exception| exception == name)
                .map(|&exception| ("builtins", exception)),
            "multiprocessing" => MULTIPROCESSING_EXCEPTIONS
                .iter()
                .find(|&&exception| exception == name)
                .map(|&exception| ("multiprocessing.context", exception)),
            _ => None,
        });
    if let Some(renamed) = renamed {
        return renamed;
    }
    let module = MODULES
        .iter()
        .chain(MODULES_READ_ONLY)
        .find(|(python2, _)| *python2 == module)
        .map_or(module, |&(_, python3)| python3);
    (module, name)
}

/// The global CPython writes for `module.name` at protocol 2 under
/// `fix_imports`: `REVERSE_NAME_MAPPING`, else `REVERSE_IMPORT_MAPPING`
/// for the module, else unchanged, as `Pickler.save_global` does.
pub(crate) fn python2_name<'a>(module: &'a str, name: &'a str) -> (&'a str, &'a str) {
    let whole = (module, name);
    let renamed = NAMES
        .iter()
        .map(|&(python2, python3)| (python3, python2))
        .chain(NAMES_WRITTEN_ONLY.iter().copied())
        .find(|(python3, _)| *python3 == whole)
        .map(|(_, python2)| python2)
        .or_else(|| match module {
            "builtins" => PYTHON2_EXCEPTIONS
                .iter()
                .find(|&&exception| exception == name)
                .map(|&exception| ("exceptions", exception))
                .or_else(|| {
                    EXCEPTIONS_WRITTEN_AS
                        .iter()
                        .find(|(python3, _)| *python3 == name)
                        .map(|&(_, python2)| ("exceptions", python2))
                }),
            "multiprocessing.context" => MULTIPROCESSING_EXCEPTIONS
                .iter()
                .find(|&&exception| exception == name)
                .map(|&exception| ("multiprocessing", exception)),
            _ => None,
        });
    if let Some(renamed) = renamed {
        return renamed;
    }
    let module = MODULES
        .iter()
        .map(|&(python2, python3)| (python3, python2))
        .chain(MODULES_WRITTEN_ONLY.iter().copied())
        .find(|(python3, _)| *python3 == module)
        .map_or(module, |(_, python2)| python2);
    (module, name)
}

#[cfg(test)]
mod tests;
