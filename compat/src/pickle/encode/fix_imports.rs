//! The Python 3 to Python 2 renames CPython applies to globals when it
//! writes protocol 2 with `fix_imports=True` (the default).
//!
//! Python 3 readers undo them, so `builtins.set` travels as
//! `__builtin__.set`; writing the same names as `pickle.dumps` keeps our
//! protocol 2 output byte-identical with CPython's and readable by Python 2.
//! The tables are `REVERSE_NAME_MAPPING` and `REVERSE_IMPORT_MAPPING` of
//! CPython 3.11's `Lib/_compat_pickle.py`, sorted for binary search.

/// A global's `(module, name)`.
type Name = (&'static str, &'static str);

/// `(module, name)` pairs renamed as a whole, sorted by key.
#[rustfmt::skip]
const NAME_MAPPING: &[(Name, Name)] = &[
    (("_functools", "reduce"), ("__builtin__", "reduce")),
    (("_socket", "socket"), ("socket", "_socketobject")),
    (("builtins", "ArithmeticError"), ("exceptions", "ArithmeticError")),
    (("builtins", "AssertionError"), ("exceptions", "AssertionError")),
    (("builtins", "AttributeError"), ("exceptions", "AttributeError")),
    (("builtins", "BaseException"), ("exceptions", "BaseException")),
    (("builtins", "BrokenPipeError"), ("exceptions", "OSError")),
    (("builtins", "BufferError"), ("exceptions", "BufferError")),
    (("builtins", "BytesWarning"), ("exceptions", "BytesWarning")),
    (("builtins", "ChildProcessError"), ("exceptions", "OSError")),
    (("builtins", "ConnectionAbortedError"), ("exceptions", "OSError")),
    (("builtins", "ConnectionError"), ("exceptions", "OSError")),
    (("builtins", "ConnectionRefusedError"), ("exceptions", "OSError")),
    (("builtins", "ConnectionResetError"), ("exceptions", "OSError")),
    (("builtins", "DeprecationWarning"), ("exceptions", "DeprecationWarning")),
    (("builtins", "EOFError"), ("exceptions", "EOFError")),
    (("builtins", "EnvironmentError"), ("exceptions", "EnvironmentError")),
    (("builtins", "Exception"), ("exceptions", "Exception")),
    (("builtins", "FileExistsError"), ("exceptions", "OSError")),
    (("builtins", "FileNotFoundError"), ("exceptions", "OSError")),
    (("builtins", "FloatingPointError"), ("exceptions", "FloatingPointError")),
    (("builtins", "FutureWarning"), ("exceptions", "FutureWarning")),
    (("builtins", "GeneratorExit"), ("exceptions", "GeneratorExit")),
    (("builtins", "IOError"), ("exceptions", "IOError")),
    (("builtins", "ImportError"), ("exceptions", "ImportError")),
    (("builtins", "ImportWarning"), ("exceptions", "ImportWarning")),
    (("builtins", "IndentationError"), ("exceptions", "IndentationError")),
    (("builtins", "IndexError"), ("exceptions", "IndexError")),
    (("builtins", "InterruptedError"), ("exceptions", "OSError")),
    (("builtins", "IsADirectoryError"), ("exceptions", "OSError")),
    (("builtins", "KeyError"), ("exceptions", "KeyError")),
    (("builtins", "KeyboardInterrupt"), ("exceptions", "KeyboardInterrupt")),
    (("builtins", "LookupError"), ("exceptions", "LookupError")),
    (("builtins", "MemoryError"), ("exceptions", "MemoryError")),
    (("builtins", "ModuleNotFoundError"), ("exceptions", "ImportError")),
    (("builtins", "NameError"), ("exceptions", "NameError")),
    (("builtins", "NotADirectoryError"), ("exceptions", "OSError")),
    (("builtins", "NotImplementedError"), ("exceptions", "NotImplementedError")),
    (("builtins", "OSError"), ("exceptions", "OSError")),
    (("builtins", "OverflowError"), ("exceptions", "OverflowError")),
    (("builtins", "PendingDeprecationWarning"), ("exceptions", "PendingDeprecationWarning")),
    (("builtins", "PermissionError"), ("exceptions", "OSError")),
    (("builtins", "ProcessLookupError"), ("exceptions", "OSError")),
    (("builtins", "ReferenceError"), ("exceptions", "ReferenceError")),
    (("builtins", "RuntimeError"), ("exceptions", "RuntimeError")),
    (("builtins", "RuntimeWarning"), ("exceptions", "RuntimeWarning")),
    (("builtins", "StopIteration"), ("exceptions", "StopIteration")),
    (("builtins", "SyntaxError"), ("exceptions", "SyntaxError")),
    (("builtins", "SyntaxWarning"), ("exceptions", "SyntaxWarning")),
    (("builtins", "SystemError"), ("exceptions", "SystemError")),
    (("builtins", "SystemExit"), ("exceptions", "SystemExit")),
    (("builtins", "TabError"), ("exceptions", "TabError")),
    (("builtins", "TimeoutError"), ("exceptions", "OSError")),
    (("builtins", "TypeError"), ("exceptions", "TypeError")),
    (("builtins", "UnboundLocalError"), ("exceptions", "UnboundLocalError")),
    (("builtins", "UnicodeDecodeError"), ("exceptions", "UnicodeDecodeError")),
    (("builtins", "UnicodeEncodeError"), ("exceptions", "UnicodeEncodeError")),
    (("builtins", "UnicodeError"), ("exceptions", "UnicodeError")),
    (("builtins", "UnicodeTranslateError"), ("exceptions", "UnicodeTranslateError")),
    (("builtins", "UnicodeWarning"), ("exceptions", "UnicodeWarning")),
    (("builtins", "UserWarning"), ("exceptions", "UserWarning")),
    (("builtins", "ValueError"), ("exceptions", "ValueError")),
    (("builtins", "Warning"), ("exceptions", "Warning")),
    (("builtins", "ZeroDivisionError"), ("exceptions", "ZeroDivisionError")),
    (("builtins", "chr"), ("__builtin__", "unichr")),
    (("builtins", "filter"), ("itertools", "ifilter")),
    (("builtins", "int"), ("__builtin__", "long")),
    (("builtins", "map"), ("itertools", "imap")),
    (("builtins", "range"), ("__builtin__", "xrange")),
    (("builtins", "str"), ("__builtin__", "unicode")),
    (("builtins", "zip"), ("itertools", "izip")),
    (("collections", "UserDict"), ("UserDict", "IterableUserDict")),
    (("collections", "UserList"), ("UserList", "UserList")),
    (("collections", "UserString"), ("UserString", "UserString")),
    (("dbm", "whichdb"), ("whichdb", "whichdb")),
    (("functools", "reduce"), ("__builtin__", "reduce")),
    (("http.server", "CGIHTTPRequestHandler"), ("CGIHTTPServer", "CGIHTTPRequestHandler")),
    (("http.server", "SimpleHTTPRequestHandler"), ("SimpleHTTPServer", "SimpleHTTPRequestHandler")),
    (("itertools", "filterfalse"), ("itertools", "ifilterfalse")),
    (("itertools", "zip_longest"), ("itertools", "izip_longest")),
    (("multiprocessing.connection", "Connection"), ("_multiprocessing", "Connection")),
    (("multiprocessing.context", "AuthenticationError"), ("multiprocessing", "AuthenticationError")),
    (("multiprocessing.context", "BufferTooShort"), ("multiprocessing", "BufferTooShort")),
    (("multiprocessing.context", "Process"), ("multiprocessing.process", "Process")),
    (("multiprocessing.context", "ProcessError"), ("multiprocessing", "ProcessError")),
    (("multiprocessing.context", "TimeoutError"), ("multiprocessing", "TimeoutError")),
    (("multiprocessing.popen_fork", "Popen"), ("multiprocessing.forking", "Popen")),
    (("socket", "fromfd"), ("_socket", "fromfd")),
    (("sys", "intern"), ("__builtin__", "intern")),
    (("tkinter.filedialog", "FileDialog"), ("FileDialog", "FileDialog")),
    (("tkinter.filedialog", "LoadFileDialog"), ("FileDialog", "LoadFileDialog")),
    (("tkinter.filedialog", "SaveFileDialog"), ("FileDialog", "SaveFileDialog")),
    (("tkinter.simpledialog", "SimpleDialog"), ("SimpleDialog", "SimpleDialog")),
    (("urllib.error", "ContentTooShortError"), ("urllib", "ContentTooShortError")),
    (("urllib.error", "HTTPError"), ("urllib2", "HTTPError")),
    (("urllib.error", "URLError"), ("urllib2", "URLError")),
    (("urllib.parse", "quote"), ("urllib", "quote")),
    (("urllib.parse", "quote_plus"), ("urllib", "quote_plus")),
    (("urllib.parse", "unquote"), ("urllib", "unquote")),
    (("urllib.parse", "unquote_plus"), ("urllib", "unquote_plus")),
    (("urllib.parse", "urlencode"), ("urllib", "urlencode")),
    (("urllib.request", "getproxies"), ("urllib", "getproxies")),
    (("urllib.request", "pathname2url"), ("urllib", "pathname2url")),
    (("urllib.request", "url2pathname"), ("urllib", "url2pathname")),
    (("urllib.request", "urlcleanup"), ("urllib", "urlcleanup")),
    (("urllib.request", "urlopen"), ("urllib", "urlopen")),
    (("urllib.request", "urlretrieve"), ("urllib", "urlretrieve")),
    (("xmlrpc.server", "DocCGIXMLRPCRequestHandler"), ("DocXMLRPCServer", "DocCGIXMLRPCRequestHandler")),
    (("xmlrpc.server", "DocXMLRPCRequestHandler"), ("DocXMLRPCServer", "DocXMLRPCRequestHandler")),
    (("xmlrpc.server", "DocXMLRPCServer"), ("DocXMLRPCServer", "DocXMLRPCServer")),
    (("xmlrpc.server", "ServerHTMLDoc"), ("DocXMLRPCServer", "ServerHTMLDoc")),
    (("xmlrpc.server", "XMLRPCDocGenerator"), ("DocXMLRPCServer", "XMLRPCDocGenerator")),
];

/// Modules renamed whatever the name, sorted by key.
#[rustfmt::skip]
const IMPORT_MAPPING: &[(&str, &str)] = &[
    ("_bz2", "bz2"),
    ("_dbm", "dbm"),
    ("_dummy_thread", "dummy_thread"),
    ("_functools", "functools"),
    ("_gdbm", "gdbm"),
    ("_markupbase", "markupbase"),
    ("_pickle", "pickle"),
    ("_thread", "thread"),
    ("builtins", "__builtin__"),
    ("collections.abc", "_abcoll"),
    ("configparser", "ConfigParser"),
    ("copyreg", "copy_reg"),
    ("dbm", "anydbm"),
    ("dbm.bsd", "dbhash"),
    ("dbm.dumb", "dumbdbm"),
    ("dbm.gnu", "gdbm"),
    ("dbm.ndbm", "dbm"),
    ("html.entities", "htmlentitydefs"),
    ("html.parser", "HTMLParser"),
    ("http.client", "httplib"),
    ("http.cookiejar", "cookielib"),
    ("http.cookies", "Cookie"),
    ("http.server", "BaseHTTPServer"),
    ("queue", "Queue"),
    ("reprlib", "repr"),
    ("socketserver", "SocketServer"),
    ("subprocess", "commands"),
    ("test.support", "test.test_support"),
    ("tkinter", "Tkinter"),
    ("tkinter.colorchooser", "tkColorChooser"),
    ("tkinter.commondialog", "tkCommonDialog"),
    ("tkinter.constants", "Tkconstants"),
    ("tkinter.dialog", "Dialog"),
    ("tkinter.dnd", "Tkdnd"),
    ("tkinter.filedialog", "tkFileDialog"),
    ("tkinter.font", "tkFont"),
    ("tkinter.messagebox", "tkMessageBox"),
    ("tkinter.scrolledtext", "ScrolledText"),
    ("tkinter.simpledialog", "tkSimpleDialog"),
    ("tkinter.tix", "Tix"),
    ("tkinter.ttk", "ttk"),
    ("urllib.parse", "urlparse"),
    ("urllib.request", "urllib2"),
    ("urllib.robotparser", "robotparser"),
    ("winreg", "_winreg"),
    ("xmlrpc.client", "xmlrpclib"),
    ("xmlrpc.server", "SimpleXMLRPCServer"),
];

/// The `(module, name)` CPython writes for a global under `fix_imports`.
pub(super) fn python2_name<'a>(module: &'a str, name: &'a str) -> (&'a str, &'a str) {
    if let Ok(i) = NAME_MAPPING.binary_search_by(|(key, _)| (key.0, key.1).cmp(&(module, name))) {
        return NAME_MAPPING[i].1;
    }
    if let Ok(i) = IMPORT_MAPPING.binary_search_by(|(key, _)| key.cmp(&module)) {
        return (IMPORT_MAPPING[i].1, name);
    }
    (module, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_for_binary_search() {
        assert!(NAME_MAPPING.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(IMPORT_MAPPING.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn renames_like_cpython() {
        assert_eq!(python2_name("builtins", "set"), ("__builtin__", "set"));
        assert_eq!(python2_name("builtins", "range"), ("__builtin__", "xrange"));
        assert_eq!(
            python2_name("copyreg", "_reconstructor"),
            ("copy_reg", "_reconstructor")
        );
        assert_eq!(
            python2_name("torch._utils", "_rebuild_tensor_v2"),
            ("torch._utils", "_rebuild_tensor_v2")
        );
    }
}
