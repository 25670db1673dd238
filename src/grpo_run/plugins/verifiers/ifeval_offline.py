"""Hand-written replacements for the if-verifiable checkers that need NLTK data.

Seven of the 83 checkers call NLTK functions that load data files (punkt, punkt_tab, the averaged
perceptron tagger, the stopwords corpus). No package registry reachable here carries that data,
NLTK downloads it from GitHub at run time, and a reward must not depend on whether a machine
happened to have it. These checkers are therefore replaced, on every machine, by versions that need
no data; everything else about them (kwargs, relations, thresholds) is the library's:

=====================================  =============================  ================================
id                                     NLTK data the library needs    replacement
=====================================  =============================  ================================
length_constraints:number_sentences    punkt (sentence tokenizer)     regex sentence splitter [1]
change_case:capital_word_frequency     punkt_tab (word_tokenize)      offline word tokenizer [2]
words:keywords_specific_position       punkt_tab (word_tokenize)      offline word tokenizer [2]
words:words_position                   punkt_tab (word_tokenize)      offline word tokenizer [2]
format:title_case                      punkt_tab (word_tokenize)      offline word tokenizer [2]
ratio:stop_words                       stopwords corpus               NLTK's English list, inlined [3]
words:start_verb                       punkt_tab + perceptron tagger  verb lexicon + morphology [4]
=====================================  =============================  ================================

[1] The library's own regex splitter (``split_into_sentences``), which IFBench's sentence-based
    checkers already use, so "sentence" means the same thing for every constraint. It differs from
    punkt on rare abbreviations.
[2] ``nltk.word_tokenize`` is punkt sentence splitting followed by NLTK's Treebank word tokenizer,
    which is pure regex; here the sentences come from [1] and the tokenizer is the same.
[3] The 179-word English list of NLTK's stopwords corpus, without the entries that contain an
    apostrophe: the checker counts ``\\w+`` tokens, which never contain one.
[4] A statistical tagger cannot be rebuilt without its model. The first token counts as a verb
    when it is a known verb form (a lexicon of common English verbs with their inflections, and the
    auxiliaries be/have/do), or looks like a gerund or past form (``-ing``/``-ed``, minus common
    nouns and adjectives with those endings). Modals (can, will, should...) are not verbs, as in
    the Penn tag set the checker uses (``MD``). Words that are both noun and verb ("Plan", "Love")
    count as verbs: at the start of a response they are most often imperatives.

Two more mixins fix the library where it replaces a valid argument by a random one
(``repeat:repeat_span`` with ``n_start = 0``, ``keywords:letter_frequency`` with a character
that is not a letter). The replacements are mixins over the library's classes, so a library update that renames the
attributes they read fails the tests rather than silently changing rewards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from grpo_run.plugins.verifiers.ifeval_library import load_library

_WORD = re.compile(r"\w+")
_LESS_THAN = "less than"  # the other relation IFEval allows is "at least"


# --------------------------------------------------------------------------------------------
# Data-free text helpers
# --------------------------------------------------------------------------------------------


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by the library's regex splitter (no punkt)."""
    return load_library().split_into_sentences(text)


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize`` without punkt: regex sentences, then the Treebank tokenizer."""
    treebank = _treebank_tokenizer()
    return [token for sentence in split_sentences(text) for token in treebank.tokenize(sentence)]


@cache
def _treebank_tokenizer() -> Any:
    """NLTK's Treebank word tokenizer (pure regex; imported on first use, nltk is slow to import)."""
    from nltk.tokenize.destructive import NLTKWordTokenizer

    return NLTKWordTokenizer()


STOPWORDS: frozenset[str] = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this
    that these those am is are was were be been being have has had having do does did doing a an
    the and but if or because as until while of at by for with about against between into through
    during before after above below to from up down in out on off over under again further then
    once here there when where why how all any both each few more most other some such no nor not
    only own same so than too very s t can will just don should now d ll m o re ve y ain aren
    couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won
    wouldn""".split()
)
"""NLTK's English stopwords (apostrophe-free entries; see the module docstring)."""

_BASE_VERBS = frozenset(
    """accept achieve act add address adjust admire admit adopt advise affect agree aim allow
    analyse analyze announce answer appear apply appreciate approach argue arrange arrive ask
    assess assign assist assume attach attack attempt attend avoid bake balance be bear beat
    become begin believe belong bend bet bind bite blend blow boil book borrow break breathe bring
    brush build burn buy calculate call calm care carry catch celebrate change charge chase check
    choose cite claim clarify classify clean clear click climb close collect combine come comfort
    compare compile complete compose compute concentrate conclude conduct confirm connect consider
    construct consult contact contain continue contribute control convert convince cook copy
    correct count cover crack craft create cross cry cultivate cut dance deal debate decide declare
    decorate define delete deliver demonstrate deny depend describe design destroy detect determine
    develop die dig discover discuss display dive divide do double download drag draw dream dress
    drink drive drop dry earn eat edit educate eliminate embrace emphasize employ enable encourage
    end engage enhance enjoy ensure enter establish estimate evaluate examine exercise exist expand
    expect experience experiment explain explore express extend face fail fall feed feel fetch
    fight fill find finish fit fix fly focus fold follow forget forgive form formulate foster free
    freeze gain gather generate get give glance go grab grant greet grow guess guide hand handle
    hang happen hate have head hear help hide highlight hit hold hope hurry identify ignore
    illustrate imagine implement imply improve include increase indicate inform insert inspire
    install integrate intend introduce invent invest investigate invite involve join judge jump
    keep kick kill kiss knock know label lack land laugh launch lay lead lean learn leave lend let
    lie lift light like limit link list listen live locate lock log look lose love maintain make
    manage map mark master match matter mean measure meet melt mention merge mind minimize miss mix
    modify monitor motivate move multiply name navigate need negotiate note notice obey observe
    obtain occur offer open operate order organise organize outline overcome own paint participate
    pass pause pay perform persuade pick picture place plan plant play point pour practice
    practise praise pray predict prefer prepare present preserve press pretend prevent print
    prioritize proceed produce promise promote protect prove provide publish pull punch purchase
    pursue push put question raise reach react read realize receive recognize recommend record
    recover reduce reflect refuse regard reject relax release rely remain remember remind remove
    rent repair repeat replace reply report represent request require research reserve resolve
    respect respond rest restore retain retire return reveal review revise ride ring rise roll
    rub rule run rush satisfy save say scan schedule scroll search secure see seek seem select sell
    send separate serve set settle shake shape share shift shine shoot shop show shut sign simplify
    sing sink sit skip sleep slice slide smell smile solve sort speak specify spend split spread
    stand start state stay steal step stick stir stop store strengthen stretch strike strive study
    submit succeed suggest summarize supply support suppose surround survive swim switch take talk
    taste teach tear tell tend test thank think throw tie touch track trade train transform
    translate travel treat trust try turn type understand unite unlock update upgrade upload urge
    use utilize value verify view visit vote wait wake walk want warn wash watch water wear welcome
    win wipe wish wonder work worry wrap write yell""".split()
)
_IRREGULAR_FORMS = frozenset(
    """am is are was were been being has had does did done ate eaten began begun bent bit bitten
    blew blown bore borne bought brought broke broken built burnt came caught chose chosen cut dealt
    dove drank drunk drew drawn drove driven dug fed fell fallen felt fought found fled flew flown
    forgot forgotten forgave forgiven froze frozen gave given got gotten gone went grew grown hung
    heard hid hidden held hurt kept knew known laid led leant learnt left lent lay lain lit lost
    made meant met paid put ran read rode ridden rang rung rose risen said sang sung sank sunk sat
    saw seen sold sent set shook shaken shone shot showed shown shut slept slid sold spoke spoken
    spent spun split spread stood stole stolen stuck struck swam swum swore sworn swept took taken
    taught tore torn told thought threw thrown understood woke woken wore worn won wound wrote
    written""".split()
)
_MODALS = frozenset("can could may might must shall should will would ought".split())
_NOT_VERBS_ING = frozenset(
    """anything ceiling clothing darling during evening everything king morning nothing sibling
    something spring sterling string thing wedding wing""".split()
)
_NOT_VERBS_ED = frozenset("hundred indeed kindred naked ragged rugged sacred wicked".split())


def _is_base_verb(word: str) -> bool:
    return word in _BASE_VERBS


def is_verb_form(token: str) -> bool:
    """Whether ``token`` reads as a verb (Penn VB/VBD/VBG/VBN/VBP/VBZ) at the start of a text."""
    word = token.lower()
    if not word.isalpha() or word in _MODALS:
        return False
    if _is_base_verb(word) or word in _IRREGULAR_FORMS:
        return True
    if word.endswith("ies") and _is_base_verb(word[:-3] + "y"):
        return True
    if word.endswith("es") and _is_base_verb(word[:-2]):
        return True
    if word.endswith("s") and _is_base_verb(word[:-1]):
        return True
    if word.endswith("ied") and _is_base_verb(word[:-3] + "y"):
        return True
    if word.endswith("ed") and (_is_base_verb(word[:-1]) or _is_base_verb(word[:-2])):
        return True
    if word.endswith("ing") and len(word) >= 5 and word not in _NOT_VERBS_ING:
        return True
    return word.endswith("ed") and len(word) >= 5 and word not in _NOT_VERBS_ED


# --------------------------------------------------------------------------------------------
# Mixins over the library's checkers (they read the attributes its build_description sets)
# --------------------------------------------------------------------------------------------


def _compare(count: int, relation: str, threshold: int) -> bool:
    return count < threshold if relation == _LESS_THAN else count >= threshold


class _NumberOfSentences:
    _num_sentences_threshold: int
    _comparison_relation: str

    def check_following(self, value: str) -> bool:
        count = len(split_sentences(value))
        return _compare(count, self._comparison_relation, self._num_sentences_threshold)


class _CapitalWordFrequency:
    _frequency: int
    _comparison_relation: str

    def check_following(self, value: str) -> bool:
        capital_words = sum(1 for word in word_tokenize(value) if word.isupper())
        return _compare(capital_words, self._comparison_relation, self._frequency)


class _StopWordPercentage:
    _percentage: float

    def check_following(self, value: str) -> bool:
        words = _WORD.findall(value)
        if not words:
            return False
        stopwords = sum(1 for word in words if word.lower() in STOPWORDS)
        return stopwords / len(words) * 100 <= self._percentage


class _StartWithVerb:
    def check_following(self, value: str) -> bool:
        sentences = split_sentences(value)  # the first token is in the first sentence
        tokens = word_tokenize(sentences[0]) if sentences else []
        return bool(tokens) and is_verb_form(tokens[0])


class _KeywordSpecificPosition:
    _keyword: str
    _n: int
    _m: int

    def check_following(self, value: str) -> bool:
        sentences = split_sentences(value)
        if len(sentences) < self._n:
            return False
        words = word_tokenize(sentences[self._n - 1])
        return len(words) >= self._m and words[self._m - 1] == self._keyword


class _WordsPosition:
    _keyword: str

    def check_following(self, value: str) -> bool:
        words = word_tokenize(value)
        return len(words) >= 2 and words[1] == words[-2] == self._keyword


class _TitleCase:
    def check_following(self, value: str) -> bool:
        for word in word_tokenize(value):
            head, tail = word[0], word[1:]
            if head.islower() and (tail.isupper() or tail.islower()):
                return False
        return True


class _RepeatSpan:
    """Library fix: ``n_start=0`` (the first word) is a valid span start, not "missing".

    The library reads a 0 start as absent and draws a random one (which fails outright for a
    one-word prompt), so it is handed a non-zero start and the real one is set afterwards. The
    arguments are validated before (``n_end > n_start >= 0``).
    """

    _n_start: int
    _description_pattern: str

    def build_description(self, *, prompt_to_repeat: str, n_start: int, n_end: int) -> str:
        super().build_description(  # type: ignore[misc]
            prompt_to_repeat=prompt_to_repeat, n_start=n_start or n_end, n_end=n_end
        )
        self._n_start = n_start
        return self._description_pattern.format(n_start=n_start, n_end=n_end)


class _LetterFrequency:
    """Library fix: the "letter" may be any single character, as in IFEval's own prompts (1122
    counts ``'#'``, 1129 ``'!'``).

    The library (like IFEval's reference code) swaps anything but an ASCII letter for a random
    letter, so it is handed a letter and the real character is set afterwards; the text and the
    character are compared lower-cased, as the library does. The arguments are validated before
    (one character).
    """

    _letter: str
    _description_pattern: str

    def build_description(self, *, letter: str, let_frequency: int, let_relation: str) -> str:
        super().build_description(letter="a", let_frequency=let_frequency, let_relation=let_relation)  # type: ignore[misc]
        self._letter = letter.lower()
        return self._description_pattern.format(letter=letter, let_frequency=let_frequency, let_relation=let_relation)


OVERRIDES: Mapping[str, type] = {
    "length_constraints:number_sentences": _NumberOfSentences,
    "change_case:capital_word_frequency": _CapitalWordFrequency,
    "ratio:stop_words": _StopWordPercentage,
    "words:start_verb": _StartWithVerb,
    "words:keywords_specific_position": _KeywordSpecificPosition,
    "words:words_position": _WordsPosition,
    "format:title_case": _TitleCase,
    "repeat:repeat_span": _RepeatSpan,
    "keywords:letter_frequency": _LetterFrequency,
}
"""Instruction id -> mixin placed in front of the library's checker class."""

NEEDS_NLTK_DATA: frozenset[str] = frozenset(OVERRIDES) - {"repeat:repeat_span", "keywords:letter_frequency"}
"""The ids whose library checker loads NLTK data (replaced by hand, see the module docstring)."""


@cache
def checker_classes() -> Mapping[str, type]:
    """Every supported instruction id (25 IFEval + 58 IFBench) -> its checker class."""
    library = load_library()
    classes: dict[str, type] = {**library.ifeval_checkers, **library.ifbench_checkers}
    for instruction_id, mixin in OVERRIDES.items():
        base = classes[instruction_id]
        classes[instruction_id] = type(base.__name__, (mixin, base), {"__module__": __name__})
    return classes
