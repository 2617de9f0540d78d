"""Block Kit validation and normalisation for the Slack fake (slack_api.py), with the limits Slack enforces on
messages (docs.slack.dev, Block Kit reference) and its error wording: chat.postMessage answers
{"ok":false,"error":"invalid_blocks","errors":["<why> [json-pointer:/blocks/0/text/text]"],
 "response_metadata":{"messages":["[ERROR] <why> [json-pointer:...]"]}}.

Checked (everything else in a block is stored as given):
  message        at most 50 blocks; a block is an object with a known type; block_id at most 255 characters and
                 unique in the message
  section        text (a text object) and/or fields (1-10 text objects of at most 2000 characters); one of them;
                 accessory an element
  text object    type plain_text or mrkdwn (header, button: plain_text only), text a string of 1-3000 characters
                 (header 150, button 75)
  header         text plain_text of 1-150 characters
  context        elements 1-10 (text objects or images)
  actions        elements 1-25; action_id at most 255 characters and unique in its block (Slack: "Should be unique
                 among all other action_ids in the containing block")
  button         text plain_text 1-75, value at most 2000, url at most 3000, style primary|danger
  markdown       text 1-12000 characters
Stored messages carry what Slack adds: a block_id for every block that had none, an action_id for every
interactive element that had none, and "emoji": true on plain_text objects.
"""

import random
import string

MAX_BLOCKS = 50
BLOCK_TYPES = {"section", "actions", "context", "divider", "header", "image", "rich_text", "input", "markdown",
               "file", "video", "context_actions", "table"}
ELEMENT_TYPES = {"button", "static_select", "external_select", "users_select", "conversations_select",
                 "channels_select", "multi_static_select", "multi_external_select", "multi_users_select",
                 "multi_conversations_select", "multi_channels_select", "overflow", "datepicker", "timepicker",
                 "datetimepicker", "checkboxes", "radio_buttons", "image", "workflow_button", "plain_text_input",
                 "email_text_input", "url_text_input", "number_input", "rich_text_input", "feedback_buttons",
                 "icon_button"}
INTERACTIVE = ELEMENT_TYPES - {"image"}


class BlockError(Exception):
    """One or more Block Kit errors, each "<why> [json-pointer:/blocks/...]"."""

    def __init__(self, errors):
        super().__init__("; ".join(errors))
        self.errors = errors


def _random_id(n):
    return "".join(random.choice(string.ascii_letters + string.digits) for _ in range(n))


class _Checker:
    def __init__(self):
        self.errors = []

    def fail(self, why, pointer):
        self.errors.append("%s [json-pointer:%s]" % (why, pointer))

    def length(self, value, pointer, low, high):
        if not isinstance(value, str):
            self.fail("must provide a string", pointer)
        elif len(value) < low:
            self.fail("must be more than %d characters" % (low - 1), pointer)
        elif len(value) > high:
            self.fail("must be less than %d characters" % (high + 1), pointer)

    def text_object(self, obj, pointer, high=3000, plain_only=False):
        if not isinstance(obj, dict):
            self.fail("must provide an object", pointer)
            return
        kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
        if obj.get("type") not in kinds:
            self.fail("must be one of the provided options (%s)" % ", ".join(kinds), pointer + "/type")
        self.length(obj.get("text"), pointer + "/text", 1, high)
        if obj.get("type") == "plain_text" and "emoji" not in obj:
            obj["emoji"] = True

    def element(self, el, pointer, action_ids):
        if not isinstance(el, dict):
            self.fail("must provide an object", pointer)
            return
        kind = el.get("type")
        if kind not in ELEMENT_TYPES:
            self.fail("must be a valid enum value", pointer + "/type")
            return
        if kind in INTERACTIVE:
            if "action_id" in el:
                self.length(el.get("action_id"), pointer + "/action_id", 1, 255)
            else:
                el["action_id"] = _random_id(5)
            if isinstance(el.get("action_id"), str):
                if el["action_id"] in action_ids:
                    self.fail("action_id already exists in this block", pointer + "/action_id")
                action_ids.add(el["action_id"])
        if kind == "button":
            self.text_object(el.get("text"), pointer + "/text", 75, plain_only=True)
            if "value" in el:
                self.length(el["value"], pointer + "/value", 1, 2000)
            if "url" in el:
                self.length(el["url"], pointer + "/url", 1, 3000)
            if "style" in el and el["style"] not in ("primary", "danger"):
                self.fail("must be a valid enum value", pointer + "/style")
        elif kind == "image":
            if "image_url" not in el and "slack_file" not in el:
                self.fail("must provide image_url or slack_file", pointer)
            self.length(el.get("alt_text"), pointer + "/alt_text", 1, 2000)

    def elements(self, block, pointer, low, high, check):
        els = block.get("elements")
        if not isinstance(els, list):
            self.fail("must provide an array", pointer + "/elements")
            return
        if len(els) < low:
            self.fail("must provide at least %d items" % low, pointer + "/elements")
        if len(els) > high:
            self.fail("no more than %d items allowed" % high, pointer + "/elements")
        for i, el in enumerate(els):
            check(el, "%s/elements/%d" % (pointer, i))

    def block(self, block, pointer, block_ids):
        if not isinstance(block, dict):
            self.fail("must provide an object", pointer)
            return
        kind = block.get("type")
        if kind not in BLOCK_TYPES:
            self.fail("must be a valid enum value", pointer + "/type")
            return
        if "block_id" in block:
            self.length(block["block_id"], pointer + "/block_id", 1, 255)
            if block["block_id"] in block_ids:
                self.fail("block_id already exists", pointer + "/block_id")
        else:
            block["block_id"] = _random_id(5)
        block_ids.add(block.get("block_id"))
        action_ids = set()
        if kind == "section":
            if "text" not in block and "fields" not in block:
                self.fail("must provide text or fields", pointer)
            if "text" in block:
                self.text_object(block["text"], pointer + "/text")
            if "fields" in block:
                fields = block["fields"]
                if not isinstance(fields, list) or not fields:
                    self.fail("must provide at least 1 items", pointer + "/fields")
                elif len(fields) > 10:
                    self.fail("no more than 10 items allowed", pointer + "/fields")
                else:
                    for i, f in enumerate(fields):
                        self.text_object(f, "%s/fields/%d" % (pointer, i), 2000)
            if "accessory" in block:
                self.element(block["accessory"], pointer + "/accessory", action_ids)
        elif kind == "header":
            self.text_object(block.get("text"), pointer + "/text", 150, plain_only=True)
        elif kind == "context":
            def context_element(el, p):
                if isinstance(el, dict) and el.get("type") == "image":
                    self.element(el, p, action_ids)
                else:
                    self.text_object(el, p)
            self.elements(block, pointer, 1, 10, context_element)
        elif kind == "actions":
            self.elements(block, pointer, 1, 25, lambda el, p: self.element(el, p, action_ids))
        elif kind == "markdown":
            self.length(block.get("text"), pointer + "/text", 1, 12000)
        elif kind == "rich_text":
            if not isinstance(block.get("elements"), list):
                self.fail("must provide an array", pointer + "/elements")
        elif kind == "image":
            self.element(dict(block, type="image"), pointer, action_ids)


def validate(blocks):
    """Checks a message's blocks (a list, already parsed) in place, adding the ids Slack adds. Raises BlockError."""
    checker = _Checker()
    if len(blocks) > MAX_BLOCKS:
        checker.fail("no more than %d items allowed" % MAX_BLOCKS, "/blocks")
    block_ids = set()
    for i, block in enumerate(blocks):
        checker.block(block, "/blocks/%d" % i, block_ids)
    if checker.errors:
        raise BlockError(checker.errors)
    return blocks


def rich_text(text):
    """The rich_text block Slack's clients attach to what a user types (plain text sections, user mentions)."""
    elements = []
    pos = 0
    while pos < len(text):
        start = text.find("<@", pos)
        end = text.find(">", start) if start >= 0 else -1
        if start < 0 or end < 0:
            elements.append({"type": "text", "text": text[pos:]})
            break
        if start > pos:
            elements.append({"type": "text", "text": text[pos:start]})
        elements.append({"type": "user", "user_id": text[start + 2:end].split("|", 1)[0]})
        pos = end + 1
    return [{"type": "rich_text", "block_id": _random_id(4),
             "elements": [{"type": "rich_text_section", "elements": elements}]}]


def buttons(blocks):
    """Every button in a message's blocks: (block_id, element)."""
    found = []
    for block in blocks or []:
        if not isinstance(block, dict):
            continue
        candidates = list(block.get("elements") or []) if block.get("type") == "actions" else []
        if block.get("type") == "section" and isinstance(block.get("accessory"), dict):
            candidates.append(block["accessory"])
        for el in candidates:
            if isinstance(el, dict) and el.get("type") == "button":
                found.append((block.get("block_id"), el))
    return found
