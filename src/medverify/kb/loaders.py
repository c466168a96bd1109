"""Document loaders: files and directories in, a stream of :class:`Document` out.

Formats: plain text (.txt), Markdown (.md), HTML (.html/.htm, trafilatura with a plain
fallback), PDF (pypdf), MedQuAD XML (.xml) and JSONL corpora (.jsonl, one
``{doc_id, title, text[, url, source]}`` object per line). Directories are walked in
sorted order. Problems (binary files, corrupt or encrypted PDFs, empty documents, bad
JSONL lines) are recorded in a :class:`LoadReport` and skipped; nothing here raises for
one bad file. Loaders are generators: a corpus is never held in memory.

Text and Markdown files larger than :data:`STREAM_BYTES` are not read into one string:
:func:`iter_sources` yields them as :class:`TextFile` (the file, its title and how it
decodes), which the knowledge base reads, hashes and chunks piece by piece.

Document ids made from paths are percent-encoded where the name holds control
characters (:mod:`medverify.kb.names`: reversible, unchanged for ordinary names), and titles
are one line (:func:`medverify.text.one_line`), so no name forges output lines.

ClinicalTrials.gov study records (``kb ingest --format ctgov``) go through
:func:`iter_ctgov`: each study is curated into its 15-section summary
(:mod:`medverify.trials.curate`), one document per section.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from medverify.kb.names import encode_id, needs_encoding
from medverify.records import Document
from medverify.text import one_line, printable

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt", ".text"}
MARKDOWN_SUFFIXES = {".md", ".markdown"}
HTML_SUFFIXES = {".html", ".htm", ".xhtml"}
SNIFF_BYTES = 8192
STREAM_BYTES = 8 * 1024 * 1024  # text and Markdown files above this are streamed
READ_BYTES = 1024 * 1024  # bytes read at once from a streamed file


class SkippedFile(BaseModel):
    path: str
    reason: str


class LoadReport(BaseModel):
    """What the loaders saw: files read, documents yielded, files skipped and why."""

    files: int = 0
    documents: int = 0
    skipped: list[SkippedFile] = Field(default_factory=list)
    files_with_replacements: int = 0
    replaced_chars: int = 0
    warnings: list[str] = Field(default_factory=list)  # kept, but with a problem noted

    def skip(self, path: Path | str, reason: str) -> None:
        self.skipped.append(SkippedFile(path=str(path), reason=reason))
        log.info("skipped %s: %s", printable(str(path)), printable(reason))


class TextFile(BaseModel):
    """A text or Markdown file too large to hold as one string: it stands for the
    :class:`Document` ``load()`` returns, and is read piece by piece."""

    doc_id: str
    path: Path
    title: str | None = None
    url: str | None = None
    source: str | None = None
    meta: dict[str, object] = Field(default_factory=dict)
    errors: Literal["strict", "replace"] = "strict"  # as read_text decodes it

    def pieces(self) -> Iterator[str]:
        """The text, in consecutive pieces of about READ_BYTES characters."""
        return _decoded(self.path, self.errors)[0]

    def load(self) -> Document:
        """The whole document in memory."""
        return Document(doc_id=self.doc_id, text="".join(self.pieces()), title=self.title,
                        url=self.url, source=self.source, meta=self.meta)


KBInput = Document | TextFile
"""What ``KnowledgeBase.ingest`` takes: a document in memory, or a large file read in pieces."""


def iter_documents(paths: Iterable[str | Path], report: LoadReport | None = None,
                   limit: int | None = None) -> Iterator[Document]:
    """Yield documents from files and directories (walked recursively, sorted)."""
    for item in iter_sources(paths, report, limit):
        yield item.load() if isinstance(item, TextFile) else item


def iter_sources(paths: Iterable[str | Path], report: LoadReport | None = None,
                 limit: int | None = None) -> Iterator[KBInput]:
    """Like :func:`iter_documents`, but text and Markdown files over STREAM_BYTES come as
    :class:`TextFile`, never read whole (``KnowledgeBase.ingest`` takes both)."""
    report = report if report is not None else LoadReport()
    count = 0
    for root in paths:
        for path, doc_prefix in _walk(Path(root), report):
            for doc in _load_file(path, doc_prefix, report):
                if limit is not None and count >= limit:
                    return
                report.documents += 1
                count += 1
                yield doc


def _walk(root: Path, report: LoadReport) -> Iterator[tuple[Path, str]]:
    """(file, its document id): the file name for a file, ``folder/relative/path`` for
    the files of a folder, percent-encoded by :func:`medverify.kb.names.encode_id`."""
    if root.is_file():
        yield root, encode_id(root.name)
    elif root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if not any(part.startswith(".") for part in path.relative_to(root).parts):
                yield path, encode_id(f"{root.name}/{path.relative_to(root).as_posix()}")
    else:
        report.skip(root, "no such file or directory")


def _load_file(path: Path, doc_id: str, report: LoadReport) -> Iterator[KBInput]:
    report.files += 1
    suffix = path.suffix.lower()
    loader = _LOADERS.get(suffix)
    if loader is None:
        loader = _load_text
    if suffix != ".pdf" and _is_binary(path):
        report.skip(path, "binary file (not a supported text, HTML, PDF, XML or JSONL file)")
        return
    yield from loader(path, doc_id, report)


def _is_binary(path: Path) -> bool:
    with path.open("rb") as handle:
        return b"\x00" in handle.read(SNIFF_BYTES)


def read_text(path: Path, report: LoadReport) -> str:
    """Decode as UTF-8; undecodable bytes become U+FFFD and are counted."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        replaced = text.count("\ufffd") - raw.decode("utf-8", "ignore").count("\ufffd")
        report.files_with_replacements += 1
        report.replaced_chars += replaced
        log.warning("%s: %d undecodable bytes replaced", printable(str(path)), replaced)
        return text


def _document(path: Path, doc_id: str, text: str, title: str | None,
              report: LoadReport, **extra: str | None) -> Iterator[Document]:
    if not text.strip():
        report.skip(path, "no text")
        return
    yield Document(doc_id=doc_id, text=text, title=one_line(title or path.stem), **extra)


def _load_text(path: Path, doc_id: str,
               report: LoadReport) -> Iterator[KBInput]:
    if path.stat().st_size > STREAM_BYTES:
        yield from _text_file(path, doc_id, report, markdown=False)
        return
    yield from _document(path, doc_id, read_text(path, report), path.stem, report)


_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _load_markdown(path: Path, doc_id: str,
                   report: LoadReport) -> Iterator[KBInput]:
    if path.stat().st_size > STREAM_BYTES:
        yield from _text_file(path, doc_id, report, markdown=True)
        return
    text = read_text(path, report)
    heading = _MD_HEADING.search(text)
    yield from _document(path, doc_id, text, heading.group(1) if heading else None, report)


def _text_file(path: Path, doc_id: str, report: LoadReport,
               markdown: bool) -> Iterator[TextFile]:
    """One pass over a large file: how it decodes, whether it has text, its title."""
    errors: Literal["strict", "replace"] = "strict"
    try:
        scan = _scan(_decoded(path, "strict")[0], markdown)
    except UnicodeDecodeError:
        errors = "replace"
        pieces, replaced = _decoded(path, "replace")
        scan = _scan(pieces, markdown)
        report.files_with_replacements += 1
        report.replaced_chars += replaced()
        log.warning("%s: %d undecodable bytes replaced", printable(str(path)), replaced())
    has_text, heading = scan
    if not has_text:
        report.skip(path, "no text")
        return
    yield TextFile(doc_id=doc_id, path=path, title=one_line(heading or path.stem),
                   errors=errors)


def _scan(pieces: Iterator[str], markdown: bool) -> tuple[bool, str | None]:
    """Whether the text has a non-space character, and (Markdown) its first heading,
    searched line by line."""
    has_text, heading, carry = False, None, ""
    for piece in pieces:
        has_text = has_text or (bool(piece) and not piece.isspace())
        if markdown and heading is None:
            lines, _, carry = (carry + piece).rpartition("\n")
            found = _MD_HEADING.search(lines)
            heading = found.group(1) if found else None
    if markdown and heading is None and carry:
        found = _MD_HEADING.search(carry)
        heading = found.group(1) if found else None
    return has_text, heading


def _decoded(path: Path, errors: Literal["strict", "replace"]
             ) -> tuple[Iterator[str], Callable[[], int]]:
    """The file's text in pieces, decoded as :func:`read_text` does (UTF-8 with BOM
    stripped when it decodes cleanly; UTF-8 with U+FFFD for bad bytes otherwise), and a
    count of the replacements made so far."""
    replaced = [0]

    def pieces() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8-sig" if errors == "strict"
                                               else "utf-8")(errors)
        ignoring = codecs.getincrementaldecoder("utf-8")("ignore")
        with path.open("rb") as handle:
            while raw := handle.read(READ_BYTES):
                text = decoder.decode(raw)
                if errors == "replace":
                    replaced[0] += text.count("\ufffd") - ignoring.decode(raw).count("\ufffd")
                yield text
            tail = decoder.decode(b"", final=True)
            if errors == "replace":
                replaced[0] += tail.count("\ufffd") - ignoring.decode(b"", True).count("\ufffd")
            if tail:
                yield tail

    return pieces(), lambda: replaced[0]


def _load_html(path: Path, doc_id: str, report: LoadReport) -> Iterator[Document]:
    html = read_text(path, report)
    text = html_to_text(html)
    yield from _document(path, doc_id, text, html_title(html), report)


def html_to_text(html: str) -> str:
    """Main text via trafilatura; all visible text when trafilatura finds none."""
    import trafilatura

    try:
        text = trafilatura.extract(html, include_comments=False) or ""
    except Exception as exc:  # trafilatura raises many types on odd markup
        log.info("trafilatura failed (%s); using the plain-text fallback", exc)
        text = ""
    return text if text.strip() else _visible_text(html)


class _TextCollector(HTMLParser):
    _HIDDEN: ClassVar[frozenset[str]] = frozenset(
        {"script", "style", "noscript", "template", "head"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: str | None = None
        self._hidden = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._hidden += tag in self._HIDDEN
        self._in_title = self._in_title or tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in self._HIDDEN and self._hidden > 0
        self._in_title = self._in_title and tag != "title"

    def handle_data(self, data: str) -> None:
        if self._in_title and self.title is None and data.strip():
            self.title = data.strip()
        elif not self._hidden and data.strip():
            self.parts.append(data.strip())


def _collect(html: str) -> _TextCollector:
    collector = _TextCollector()
    collector.feed(html)
    collector.close()
    return collector


def _visible_text(html: str) -> str:
    return "\n".join(_collect(html).parts)


def html_title(html: str) -> str | None:
    return _collect(html).title


def _load_pdf(path: Path, doc_id: str, report: LoadReport) -> Iterator[Document]:
    text, title = _pdf_text(path, report)
    if text is not None:
        yield from _document(path, doc_id, text, title, report)


def _pdf_text(path: Path, report: LoadReport) -> tuple[str | None, str | None]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            report.skip(path, "encrypted PDF (no password support)")
            return None, None
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else None
    except Exception as exc:  # pypdf raises many error types on damaged files
        report.skip(path, f"unreadable PDF ({type(exc).__name__}: {exc})")
        return None, None
    return "\n\n".join(p.strip() for p in pages if p.strip()), title


# MedQuAD ships two XML shapes: <Document id source url><Focus/><QAPairs><QAPair>
# <Question/><Answer/> and a few lower-case files <doc docid corpus url><doctitle-focus/>
# <qaPairs><pair><question/><answer/>.
_MEDQUAD_SHAPES = {
    "Document": ("id", "source", "Focus", "QAPair", "Question", "Answer"),
    "doc": ("docid", "corpus", "doctitle-focus", "pair", "question", "answer"),
}


def _load_medquad(path: Path, doc_id: str, report: LoadReport) -> Iterator[Document]:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        report.skip(path, f"invalid XML ({exc})")
        return
    shape = _MEDQUAD_SHAPES.get(root.tag)
    if shape is None:
        report.skip(path, f"XML with root <{root.tag}> is not a MedQuAD document")
        return
    source_attr, focus_tag = shape[1:3]
    source = root.get(source_attr)
    ident = encode_id(path.stem)  # the XML ids repeat across files in a few collections
    yield from _document(path, f"medquad:{encode_id(source or 'x')}:{ident}",
                         medquad_text(root, shape),
                         (root.findtext(focus_tag) or "").strip() or None, report,
                         url=root.get("url"), source=source)


def medquad_text(root: ET.Element, shape: tuple[str, ...] = _MEDQUAD_SHAPES["Document"]) -> str:
    """QA pairs with a non-empty answer, as ``Question\nAnswer`` blocks."""
    pair_tag, question_tag, answer_tag = shape[3:]
    blocks = []
    for pair in root.iter(pair_tag):
        question = " ".join((pair.findtext(question_tag) or "").split())
        answer = (pair.findtext(answer_tag) or "").strip()
        if answer:
            blocks.append(f"{question}\n{answer}")
    return "\n\n".join(blocks)


def _load_jsonl(path: Path, doc_id: str, report: LoadReport) -> Iterator[Document]:
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            line = _decode_line(raw, report)
            if not line.strip():
                continue
            doc = _jsonl_document(line, f"{printable(str(path))}:{number}", report)
            if doc is not None:
                yield doc


def _decode_line(raw: bytes, report: LoadReport) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        report.files_with_replacements += 1
        report.replaced_chars += text.count("\ufffd")
        return text


def _jsonl_document(line: str, where: str, report: LoadReport) -> Document | None:
    try:
        obj = json.loads(line)
        doc_id, text = str(obj["doc_id"]), obj["text"]
    except (ValueError, KeyError, TypeError) as exc:
        report.skip(where, f"bad JSONL record ({type(exc).__name__}: {exc})")
        return None
    if not isinstance(text, str) or not text.strip():
        report.skip(where, "no text")
        return None
    if needs_encoding(doc_id):  # kept as given otherwise: queries' relevance lists name it
        report.warnings.append(f"{where}: doc_id {printable(doc_id)} holds control "
                               f"characters: stored as {encode_id(doc_id)}")
        doc_id = encode_id(doc_id)
    meta = {k: v for k, v in obj.items() if k not in {"doc_id", "title", "text", "url", "source"}}
    title = obj.get("title") or None
    return Document(doc_id=doc_id, text=text,
                    title=one_line(title) if isinstance(title, str) else title,
                    url=obj.get("url"), source=obj.get("source"), meta=meta)


_LOADERS: dict[str, Callable[[Path, str, LoadReport], Iterator[KBInput]]] = {
    **dict.fromkeys(TEXT_SUFFIXES, _load_text),
    **dict.fromkeys(MARKDOWN_SUFFIXES, _load_markdown),
    **dict.fromkeys(HTML_SUFFIXES, _load_html),
    ".pdf": _load_pdf,
    ".xml": _load_medquad,
    ".jsonl": _load_jsonl,
}


def iter_ctgov(paths: Iterable[str | Path], report: LoadReport | None = None,
               limit: int | None = None, *, condition: str | None = None,
               results_only: bool = False, sample: int | None = None,
               seed: int = 0) -> Iterator[Document]:
    """ClinicalTrials.gov API v2 records (files, directories, JSONL, bulk zips) as curated
    summaries: one document per section (``<NCT>#<section>``). ``condition``,
    ``results_only``, ``sample`` and ``seed`` select studies as
    :func:`medverify.trials.curate.select_studies` does (a sample is drawn in one
    streaming pass, holding at most ``sample`` studies); ``limit`` caps documents.
    Records the reader cannot use are reported as skipped."""
    from medverify.trials.curate import curate, matches, select_studies, summary_documents
    from medverify.trials.reader import ReadReport, iter_studies

    report = report if report is not None else LoadReport()
    read = ReadReport()
    results = True if results_only else None
    studies: Iterable[Any] = iter_studies([Path(p) for p in paths], report=read)
    if sample is not None:
        studies = select_studies(studies, condition=condition, results_posted=results,
                                 n=sample, seed=seed)
    else:
        studies = (s for s in studies if matches(s.data, condition, results))
    count = 0
    for study in studies:
        summary = curate(study.data)
        report.warnings += [f"{summary.nct_id}: {problem}" for problem in summary.problems]
        for doc in summary_documents(summary, study.data):
            if limit is not None and count >= limit:
                break
            count += 1
            report.documents += 1
            yield doc
        if limit is not None and count >= limit:
            break
    for kind, messages in sorted(read.examples.items()):
        for message in messages:
            where, _, what = message.partition(": ")
            report.skip(where, f"{kind}: {what}")
