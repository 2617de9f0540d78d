"""Telegram's text rules for the Bot API fake (telegram_api.py): the HTML parse mode, the entities the server
finds in a user's text, and lengths in UTF-16 code units.

The HTML parser follows TDLib's do_parse_html (td/telegram/MessageEntity.cpp), which is what the Bot API server
runs: the same tags, the same attribute grammar, the same error texts and byte offsets. Like the real parser it
keeps a bare '&' (or an unknown entity such as "&nbsp;") and a bare '>' as text: only a '<' that does not open a
supported tag is an error ("Unsupported start tag \"\" at byte offset N" for "a < b").
"""

import re
import unicodedata


class ParseError(Exception):
    """A text the server refuses: str(e) is the reason after "can't parse entities: "."""


def utf16_len(s):
    return len(s.encode("utf-16-le")) // 2


TAGS = {"a", "b", "strong", "i", "em", "s", "strike", "del", "u", "ins", "tg-spoiler", "tg-emoji", "span", "pre",
        "code", "blockquote"}
SIMPLE = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "s": "strikethrough",
          "strike": "strikethrough", "del": "strikethrough", "u": "underline", "ins": "underline",
          "tg-spoiler": "spoiler", "span": "spoiler"}
# Links the server keeps; anything else in an <a href> is dropped silently (the text stays, the link goes).
LINK_SCHEMES = ("http://", "https://", "ftp://", "tg://", "ton://")


def _is_space(c):
    return c in (0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C)


def _decode_entity(text, pos):
    """TDLib's decode_html_entity: (code point, next position) or (0, pos) when text[pos:] is not an entity."""
    n = len(text)
    at = lambda k: text[k] if k < n else 0
    end = pos + 1
    res = 0
    if at(end) == ord("#"):
        end += 1
        if at(end) == ord("x"):
            end += 1
            while at(end) and chr(at(end)) in "0123456789abcdefABCDEF":
                res = res * 16 + int(chr(at(end)), 16)
                end += 1
        else:
            while at(end) and chr(at(end)).isdigit() and at(end) < 128:
                res = res * 10 + at(end) - 48
                end += 1
        if res == 0 or res >= 0x10FFFF or end - pos >= 10:
            return 0, pos
    else:
        while at(end) and (65 <= at(end) <= 90 or 97 <= at(end) <= 122):
            end += 1
        res = {b"lt": 60, b"gt": 62, b"amp": 38, b"quot": 34}.get(bytes(text[pos + 1:end]), 0)
        if not res:
            return 0, pos
    if at(end) == ord(";"):
        end += 1
    return res, end


class _Out:
    """The decoded text as UTF-8 bytes plus its length in UTF-16 units (entity offsets are in those)."""

    def __init__(self):
        self.buf = bytearray()
        self.utf16 = 0

    def add_byte(self, c):
        if c & 0xC0 != 0x80:  # first byte of a character; 4-byte characters are surrogate pairs
            self.utf16 += 2 if c >= 0xF0 else 1
        self.buf.append(c)

    def add_char(self, cp):
        self.buf += chr(cp).encode("utf-8", "surrogatepass")
        self.utf16 += 2 if cp > 0xFFFF else 1


def _start_tag(text, i, begin):
    """Parses <tag attr=value ...>; returns (tag, argument, index of '>')."""
    n = len(text)
    at = lambda k: text[k] if k < n else 0
    while at(i) and not _is_space(at(i)) and at(i) != ord(">"):
        i += 1
    if at(i) == 0:
        raise ParseError("Unclosed start tag at byte offset %d" % begin)
    tag = bytes(text[begin + 1:i]).decode("utf-8", "replace").lower()
    if tag not in TAGS:
        raise ParseError('Unsupported start tag "%s" at byte offset %d' % (tag, begin))
    argument = ""
    while at(i) != ord(">"):
        while at(i) and _is_space(at(i)):
            i += 1
        if at(i) == ord(">"):
            break
        name_begin = i
        while at(i) and not _is_space(at(i)) and at(i) != ord("=") and at(i) != ord(">"):
            i += 1
        name = bytes(text[name_begin:i]).decode("utf-8", "replace")
        if not name:
            raise ParseError('Empty attribute name in the tag "%s" at byte offset %d' % (tag, begin))
        while at(i) and _is_space(at(i)):
            i += 1
        if at(i) != ord("="):
            if tag == "blockquote" and name == "expandable":  # the one attribute without a value
                argument = "1"
                continue
            if at(i) == 0:
                raise ParseError('Unclosed start tag "%s" at byte offset %d' % (tag, begin))
            raise ParseError('Expected equal sign in declaration of an attribute of the tag "%s" at byte offset %d'
                             % (tag, begin))
        i += 1
        while at(i) and _is_space(at(i)):
            i += 1
        if at(i) == 0:
            raise ParseError('Unclosed start tag "%s" at byte offset %d' % (tag, begin))
        value, i = _attribute_value(text, i)
        if at(i) == 0:
            raise ParseError("Unclosed start tag at byte offset %d" % begin)
        if tag == "a" and name == "href":
            argument = value
        elif tag == "code" and name == "class" and value.startswith("language-"):
            argument = value[9:]
        elif tag == "span" and name == "class" and value.startswith("tg-"):
            argument = value[3:]
        elif tag == "tg-emoji" and name == "emoji-id":
            argument = value
        elif tag == "blockquote" and name == "expandable":
            argument = "1"
    if tag == "span" and argument != "spoiler":
        raise ParseError('Tag "span" must have class "tg-spoiler" at byte offset %d' % begin)
    return tag, argument, i


def _attribute_value(text, i):
    n = len(text)
    at = lambda k: text[k] if k < n else 0
    if at(i) not in (ord("'"), ord('"')):
        # A name token (letters, digits, periods, hyphens), not case sensitive.
        start = i
        while at(i) and (chr(at(i)).isalnum() and at(i) < 128 or at(i) in (ord("."), ord("-"))):
            i += 1
        if not _is_space(at(i)) and at(i) != ord(">"):
            raise ParseError("Unexpected end of name token at byte offset %d" % start)
        return bytes(text[start:i]).decode().lower(), i
    quote = at(i)
    i += 1
    out = bytearray()
    while at(i) and at(i) != quote:
        if at(i) == ord("&"):
            cp, nxt = _decode_entity(text, i)
            if cp:
                out += chr(cp).encode("utf-8", "surrogatepass")
                i = nxt
                continue
        out.append(at(i))
        i += 1
    if at(i) == quote:
        i += 1
    return out.decode("utf-8", "replace"), i


def _end_tag(text, i, begin, open_tag):
    n = len(text)
    at = lambda k: text[k] if k < n else 0
    while at(i) and not _is_space(at(i)) and at(i) != ord(">"):
        i += 1
    name = bytes(text[begin + 2:i]).decode("utf-8", "replace")
    while at(i) and _is_space(at(i)):
        i += 1
    if at(i) != ord(">"):
        raise ParseError("Unclosed end tag at byte offset %d" % begin)
    if name and name != open_tag:
        raise ParseError('Unmatched end tag at byte offset %d, expected "</%s>", found "</%s>"' % (begin, open_tag, name))
    return i


def _entity(tag, argument, offset, length, out, begin_pos, entities):
    """The entity a closed tag makes (appended to entities), or nothing, as TDLib decides."""
    if tag in SIMPLE:
        entities.append({"type": SIMPLE[tag], "offset": offset, "length": length})
    elif tag == "a":
        url = argument or out.buf[begin_pos:].decode("utf-8", "replace")
        if url.lower().startswith(LINK_SCHEMES):
            entities.append({"type": "text_link", "offset": offset, "length": length, "url": url})
    elif tag == "tg-emoji":
        if not argument.isdigit() or not argument or int(argument) <= 0 or int(argument) >= 2 ** 63:
            raise ParseError("Invalid custom emoji identifier specified")
        entities.append({"type": "custom_emoji", "offset": offset, "length": length, "custom_emoji_id": argument})
    elif tag == "blockquote":
        kind = "expandable_blockquote" if argument else "blockquote"
        entities.append({"type": kind, "offset": offset, "length": length})
    elif tag == "pre":
        last = entities[-1] if entities else None
        if last and last["type"] == "code" and last["offset"] == offset and last["length"] == length \
                and last.get("language"):
            last["type"] = "pre"
        else:
            entities.append({"type": "pre", "offset": offset, "length": length})
    elif tag == "code":
        last = entities[-1] if entities else None
        if last and last["type"] == "pre" and last["offset"] == offset and last["length"] == length and argument:
            last["language"] = argument
        else:
            e = {"type": "code", "offset": offset, "length": length}
            if argument:
                e["language"] = argument  # dropped below unless a <pre> around it claims it
            entities.append(e)


def parse_html(html):
    """(text, entities) for a text sent with parse_mode HTML; raises ParseError like the server."""
    text = html.encode("utf-8", "surrogatepass")
    out = _Out()
    entities = []
    stack = []  # (tag, argument, utf16 offset, byte position in out)
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == ord("&"):
            cp, nxt = _decode_entity(text, i)
            if cp:
                out.add_char(cp)
                i = nxt
                continue
        if c != ord("<"):
            out.add_byte(c)
            i += 1
            continue
        begin = i
        i += 1
        if i >= n or text[i] != ord("/"):
            tag, argument, i = _start_tag(text, i, begin)
            stack.append((tag, argument, out.utf16, len(out.buf)))
        else:
            if not stack:
                raise ParseError("Unexpected end tag at byte offset %d" % begin)
            tag, argument, offset, begin_pos = stack[-1]
            i = _end_tag(text, i, begin, tag)
            if out.utf16 > offset:
                _entity(tag, argument, offset, out.utf16 - offset, out, begin_pos, entities)
            stack.pop()
        i += 1
    if stack:
        raise ParseError('Can\'t find end tag corresponding to start tag "%s"' % stack[-1][0])
    for e in entities:
        if e["type"] == "code":
            e.pop("language", None)
    try:
        decoded = out.buf.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError("Text contains invalid Unicode characters after decoding HTML entities, check for "
                         "unmatched surrogate code units")
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return decoded, entities


# What TDLib trims from both ends of a message text (its entities move with the text).
_TRIM = " \t\n\r\x0b\x0c\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u200b\u2028\u2029" \
        "\u202f\u205f\u3000\ufeff"


def trim(text, entities):
    """The text without leading and trailing blanks, its entities shifted and clipped (empty ones dropped)."""
    stripped = text.lstrip(_TRIM)
    shift = utf16_len(text) - utf16_len(stripped)
    stripped = stripped.rstrip(_TRIM)
    limit = utf16_len(stripped)
    kept = []
    for e in entities:
        start = max(e["offset"] - shift, 0)
        end = min(e["offset"] + e["length"] - shift, limit)
        if end > start:
            kept.append(dict(e, offset=start, length=end - start))
    return stripped, kept


def _word(ch):
    if not ch:
        return False
    return ch == "_" or unicodedata.category(ch)[0] in ("L", "N")


_ALNUM_ = re.compile(r"[A-Za-z0-9_]*")


def find_entities(text):
    """The entities the server finds in a user's plain text: mentions (@name) and bot commands (/cmd[@bot]),
    with TDLib's rules (match_mentions, match_bot_commands); offsets in UTF-16 units."""
    found = []
    for i, ch in enumerate(text):
        prev = text[i - 1] if i else ""
        if ch == "@" and not _word(prev):
            name = _ALNUM_.match(text, i + 1).group()
            nxt = text[i + 1 + len(name)] if i + 1 + len(name) < len(text) else ""
            if 2 <= len(name) <= 32 and not _word(nxt):
                found.append((i, 1 + len(name), "mention"))
        elif ch == "/" and not _word(prev) and prev not in ("/", "<", ">"):
            cmd = _ALNUM_.match(text, i + 1).group()
            if not 1 <= len(cmd) <= 64:
                continue
            end = i + 1 + len(cmd)
            if end < len(text) and text[end] == "@":
                bot = _ALNUM_.match(text, end + 1).group()
                if not 3 <= len(bot) <= 32:
                    continue
                end += 1 + len(bot)
            nxt = text[end] if end < len(text) else ""
            if _word(nxt) or nxt in ("/", "<", ">"):
                continue
            found.append((i, end - i, "bot_command"))
    return [{"type": kind, "offset": utf16_len(text[:start]), "length": utf16_len(text[start:start + length])}
            for start, length, kind in found]
