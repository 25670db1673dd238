"""The ``ifeval`` verifier: every IFEval and IFBench constraint followed and broken, partial credit,
loose mode, ground-truth formats and errors, and scoring with no NLTK data and no network."""

from __future__ import annotations

import json
import os
import pickle
import string
import subprocess
import sys
from collections.abc import Iterator

import nltk
import pytest

from grpo_run import VerifierResult
from grpo_run.core.plugins.registry import ComponentRegistry, Registrar
from grpo_run.plugins.verifiers import grpo_run_register_verifiers
from grpo_run.plugins.verifiers.ifeval import IFEvalVerifier, IFEvalVerifierConfig
from grpo_run.plugins.verifiers.ifeval_offline import (
    NEEDS_NLTK_DATA,
    STOPWORDS,
    is_verb_form,
    split_sentences,
    word_tokenize,
)

ROW: dict = {"id": "t"}

IFEVAL_IDS = frozenset(
    """keywords:existence keywords:frequency keywords:forbidden_words keywords:letter_frequency
    language:response_language length_constraints:number_sentences length_constraints:number_paragraphs
    length_constraints:number_words length_constraints:nth_paragraph_first_word
    detectable_content:number_placeholders detectable_content:postscript detectable_format:number_bullet_lists
    detectable_format:constrained_response detectable_format:number_highlighted_sections
    detectable_format:multiple_sections detectable_format:json_format detectable_format:title
    combination:two_responses combination:repeat_prompt startend:end_checker
    change_case:capital_word_frequency change_case:english_capital change_case:english_lowercase
    punctuation:no_comma startend:quotation""".split()
)
IFBENCH_IDS = frozenset(
    """count:word_count_range count:unique_word_count ratio:stop_words ratio:sentence_type
    ratio:sentence_balance count:conjunctions count:person_names ratio:overlap count:numbers words:alphabet
    words:vowel words:consonants sentence:alliteration_increment words:palindrome count:punctuation
    format:parentheses format:quotes words:prime_lengths format:options format:newline format:emoji
    ratio:sentence_words count:words_japanese words:start_verb words:repeats sentence:keyword count:pronouns
    words:odd_even_syllables words:last_first words:paragraph_last_first sentence:increment
    words:no_consecutive format:line_indent format:quote_unquote format:list format:thesis format:sub-bullets
    format:no_bullets_bullets custom:multiples custom:mcq_count_length custom:reverse_newline
    custom:word_reverse custom:character_reverse custom:sentence_alphabet custom:european_capitals_sort
    custom:csv_city custom:csv_special_character custom:csv_quotes custom:date_format_list
    count:keywords_multiple words:keywords_specific_position words:words_position repeat:repeat_change
    repeat:repeat_simple repeat:repeat_span format:title_case format:output_template format:no_whitespace""".split()
)

# ---- long fixtures for the "custom:" tasks ------------------------------------------------------
AFRICA = """Algeria|Angola|Benin|Botswana|Burkina Faso|Burundi|Cabo Verde|Cameroon|Central African Republic|
Chad|Comoros|Democratic Republic of the Congo|Djibouti|Egypt|Equatorial Guinea|Eritrea|Eswatini|Ethiopia|Gabon|
Gambia|Ghana|Guinea|Guinea-Bissau|Ivory Coast|Kenya|Lesotho|Liberia|Libya|Madagascar|Malawi|Mali|Mauritania|
Mauritius|Morocco|Mozambique|Namibia|Niger|Nigeria|Republic of the Congo|Rwanda|Sao Tome and Principe|Senegal|
Seychelles|Sierra Leone|Somalia|South Africa|South Sudan|Sudan|Tanzania|Togo|Tunisia|Uganda|Zambia|Zimbabwe"""
COUNTRIES = [name.strip() for name in AFRICA.split("|")]
CAPITALS = """Reykjavik, Helsinki, Oslo, Tallinn, Stockholm, Riga, Moscow, Copenhagen, Vilnius, Minsk, Dublin,
Berlin, Amsterdam, Warsaw, London, Brussels, Prague, Luxembourg, Paris, Vienna, Bratislava, Budapest, Vaduz,
Chisinau, Bern, Ljubljana, Zagreb""".replace("\n", " ")
OPTIONS = "A. Picasso\nB. Dali\nC. Monet\nD. Warhol\nE. Kahlo"
MCQ = "\n".join(
    f"Question {i}: {text}\n{OPTIONS}"
    for i, text in enumerate(["Who?", "Who painted?", "Who painted Guernica?", "Who painted Guernica in 1937?"], 1)
)
CITY_CSV = "ID,Country,City,Year,Count\n" + "\n".join(f"{i},France,Paris,20{i:02d},{i}" for i in range(1, 8))
PRODUCT_ROWS = [f"{i},Tools,Acme,9.99,{i}" for i in range(2, 15)]
PRODUCTS_QUOTED = "\n".join(["ProductID,Category,Brand,Price,Stock", '1,"Tools & More",Acme,9.99,1', *PRODUCT_ROWS])
PRODUCTS_PLAIN = "\n".join(["ProductID,Category,Brand,Price,Stock", "1,Tools & More,Acme,9.99,1", *PRODUCT_ROWS])
STUDENTS_HEADER = '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"'
STUDENTS_QUOTED = "\n".join(
    [
        STUDENTS_HEADER,
        '"1"\t"Math"\t"A"\t"Fall"\t"95"',
        '"2"\t"Art"\t"B"\t"Fall"\t"88"',
        '"3"\t"Bio"\t"A"\t"Spring"\t"91"',
    ]
)
STUDENTS_PLAIN = "\n".join([STUDENTS_HEADER, "1\tMath\tA\tFall\t95", "2\tArt\tB\tFall\t88", "3\tBio\tA\tSpring\t91"])
ALPHABET_STORY = " ".join(f"{letter.upper()}ll is well." for letter in string.ascii_lowercase)
KEYWORDS5 = {"keyword1": "alpha", "keyword2": "bravo", "keyword3": "charlie", "keyword4": "delta", "keyword5": "echo"}
FOX = "the quick brown fox jumps over the lazy dog"


def keyword_text(echoes: int) -> str:
    return " ".join(["alpha"] + ["bravo"] * 2 + ["charlie"] * 3 + ["delta"] * 5 + ["echo"] * echoes)


# (instruction id, kwargs, a response that follows it, a response that does not)
CASES: list[tuple[str, dict, str, str]] = [
    # ---------------------------------------- IFEval ----------------------------------------
    ("keywords:existence", {"keywords": ["apple", "banana"]}, "I like Apple and banana.", "I like apple only."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 3, "relation": "at least"},
     "A cat saw a cat and a cat.", "A cat saw a cat."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"},
     "A cat sat.", "A cat saw a cat."),
    ("keywords:forbidden_words", {"forbidden_words": ["bad", "evil"]}, "A good day, badly needed.", "An Evil plan."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
     "Pizza is tasty.", "Pasta is tasty."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
     "Pasta is tasty.", "Pizza is tasty."),
    # Any single character, not only letters: IFEval's prompt 1122 asks for '#', 1129 for '!'.
    ("keywords:letter_frequency", {"letter": "#", "let_frequency": 4, "let_relation": "at least"},
     "#one #two #three #four", "#one #two #three and four"),
    ("keywords:letter_frequency", {"letter": "!", "let_frequency": 2, "let_relation": "less than"},
     "Wow! Nice.", "Wow! Nice!"),
    ("language:response_language", {"language": "de"},
     "Das ist ein schöner Tag und wir gehen heute in den Park spazieren.",
     "This is a beautiful day and we are going to the park today."),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "at least"},
     "One is here. Two is there! Is three near?", "One is here. Two is there!"),
    ("length_constraints:number_sentences", {"num_sentences": 2, "relation": "less than"},
     "Dr. Smith paid $3.50 for the U.S. edition of the book.", "One. Two."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2},
     "First paragraph.\n***\nSecond paragraph.", "First paragraph.\n\nSecond paragraph."),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"},
     "Too short.", "This sentence has exactly six words."),
    ("length_constraints:number_words", {"num_words": 5, "relation": "at least"},
     "This sentence has exactly six words.", "Too short."),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "however"},
     "Intro text.\n\nHowever, the end.", "Intro text.\n\nMoreover, the end."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address].", "Dear [name]."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\nP.S. See you.", "Hello. See you."),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hello.\nP.P.S. Bye.", "Hello.\nP.S. Bye."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* one\n* two", "* one\n* two\n- three"),
    ("detectable_format:constrained_response", {}, "My answer is maybe.", "Maybe."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "*one* and **two**", "*one* and ** **"),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nIntro\nSection 2\nBody", "Section 1\nIntro and body"),
    ("detectable_format:json_format", {}, '```json\n{"a": [1, 2]}\n```', "a: 1"),
    ("detectable_format:title", {}, "<<Ode to Joy>>\nRoses bloom.", "<< >>\nRoses bloom."),
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", "Same answer.\n******\nSame answer."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a haiku about rain."},
     "write a haiku about rain. Drops on the tin roof.", "Here is a haiku about rain."),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     "That is all. Any other questions?", "Any other questions? That is all."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"},
     "This is VERY IMPORTANT.", "This is VERY important."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "less than"},
     "This is VERY important.", "NASA and the ESA agree."),
    ("change_case:english_capital", {}, "THIS IS A LOUD SENTENCE WRITTEN IN ENGLISH.",
     "This is a quiet sentence written in English."),
    ("change_case:english_lowercase", {}, "this is a quiet sentence written in english.",
     "This is a sentence written in English."),
    ("punctuation:no_comma", {}, "No commas here.", "Yes, a comma."),
    ("startend:quotation", {}, '"Wrapped in quotes."', 'Not wrapped."'),
    # ---------------------------------------- IFBench ---------------------------------------
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "one two three four", "one two three four five six"),
    ("count:unique_word_count", {"N": 4}, "alpha beta gamma delta", "alpha alpha beta beta"),
    ("ratio:stop_words", {"percentage": 30}, "Quick brown foxes jump fences.", "It is in the house of the king."),
    ("ratio:sentence_type", {}, "I like tea. It is warm. Do you?", "I like tea. Do you?"),
    ("ratio:sentence_balance", {}, "I run. Do you? Wow!", "I run. I swim. Do you?"),
    ("count:conjunctions", {"small_n": 3}, "I ran and jumped, but fell, so I rested.", "I ran and jumped and fell."),
    ("count:person_names", {"N": 2}, "Emma met Liam.", "Emma met a friend."),
    ("ratio:overlap", {"reference_text": "the quick brown fox", "percentage": 100},
     "the quick brown fox", "completely different words"),
    ("count:numbers", {"N": 2}, "I have 3 cats and 12 dogs.", "I have 3 cats and 12 dogs and 1 bird."),
    ("words:alphabet", {}, "Apples bring cheer daily.", "Apples bring delight."),
    ("words:vowel", {}, "A cat sat at a mat", "The quick brown fox jumps over the lazy dog"),
    ("words:consonants", {}, "Strong black cats.", "A big dog."),
    ("sentence:alliteration_increment", {}, "Big dog. Silly snakes slither. Tiny tigers take tea.",
     "Silly snakes slither. Big dog."),
    ("words:palindrome", {}, "level radar civic kayak refer rotor madam stats tenet racecar",
     "level radar civic kayak refer rotor madam stats tenet noon"),
    ("count:punctuation", {}, "Hello, world. Really?! Yes; indeed: fine! Why?",
     "Hello, world. Yes; indeed: fine! Why?"),
    ("format:parentheses", {}, "(a [b {c (d [e])}])", "(a [b {c}])"),
    ("format:quotes", {}, "He said \"she said 'they said \"hi\"'\"", 'He said "hello".'),
    ("words:prime_lengths", {}, "An owl is at the den", "This is wrong"),
    ("format:options", {"options": "yes/no/maybe"}, "Yes.", "Yes, because it is true."),
    ("format:options", {"options": "a), b), c), d)"}, "b)", "b) because"),
    ("format:newline", {}, "one\ntwo\nthree", "one two\nthree"),
    ("format:emoji", {}, "I love pizza 🍕. The sun is out 🌞.", "I love pizza 🍕. The sun is out."),
    ("ratio:sentence_words", {}, "Cats run. Dogs sit. Owls fly.", "Cats run. Dogs sit still. Owls fly."),
    ("count:words_japanese", {"N": 2}, "I 猫 like 犬", "I cat like 犬"),
    ("words:start_verb", {}, "Consider the following plan.", "The plan is simple."),
    ("words:repeats", {"small_n": 2}, "the cat and the dog", "the cat, the dog, the end"),
    ("sentence:keyword", {"word": "ocean", "N": 2}, "I woke up. The Ocean was calm.", "The ocean was calm. I woke up."),
    ("count:pronouns", {"N": 3}, "I told her that they left.", "I told Sam."),
    ("words:odd_even_syllables", {}, "cat water dog", "cat dog"),
    ("words:last_first", {}, "I like tea. Tea is warm.", "I like tea. Coffee is warm."),
    ("words:paragraph_last_first", {}, "Love is all you need, love\nTime heals all wounds in time.",
     "Love is all you need\nTime heals"),
    ("sentence:increment", {"small_n": 1}, "I ran. I ran far. I ran very far.", "I ran. I ran far. I ran."),
    ("words:no_consecutive", {}, "The cat ate fish.", "The tall cat."),
    ("format:line_indent", {}, "a\n b\n  c", "a\n b\n c"),
    ("format:quote_unquote", {}, '"Carpe diem" means seize the day.', '"Carpe diem" "seize the day"'),
    ("format:list", {"sep": "SEPARATOR"}, "SEPARATOR apples\nSEPARATOR pears", "SEPARATOR apples\n- pears"),
    ("format:thesis", {}, "<i>Cats rule.</i> They are independent.", "<i>Cats rule.</i>"),
    ("format:sub-bullets", {}, "* Fruit\n  - apple\n* Veg\n  - kale", "* Fruit\n  - apple\n* Veg"),
    ("format:no_bullets_bullets", {}, "First sentence. Second sentence.\n* one\n* two",
     "Only one sentence.\n* one\n* two"),
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", "7, 14, 21, 28, 35, 42, 49"),
    ("custom:mcq_count_length", {}, MCQ, "Here you go.\n" + MCQ),
    ("custom:reverse_newline", {}, "\n".join(sorted(COUNTRIES, reverse=True)), "\n".join(sorted(COUNTRIES))),
    ("custom:word_reverse", {}, "eagle bald the is symbol national The.", "The national symbol is the bald eagle."),
    ("custom:character_reverse", {}, ".elgae dlab eht si lobmys lanoitan ehT",
     "The national symbol is the bald eagle."),
    ("custom:sentence_alphabet", {}, ALPHABET_STORY, ALPHABET_STORY.replace("All is well. Bll", "Bll is well. All")),
    ("custom:european_capitals_sort", {}, CAPITALS, CAPITALS.replace("Helsinki, Oslo", "Oslo, Helsinki")),
    ("custom:csv_city", {}, CITY_CSV, CITY_CSV.rsplit("\n", 1)[0]),
    ("custom:csv_special_character", {}, PRODUCTS_QUOTED, PRODUCTS_PLAIN),
    ("custom:csv_quotes", {}, STUDENTS_QUOTED, STUDENTS_PLAIN),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02", "1805-12-02, 2 December 1805"),
    ("count:keywords_multiple", KEYWORDS5, keyword_text(echoes=7), keyword_text(echoes=6)),
    ("words:keywords_specific_position", {"keyword": "river", "n": 2, "m": 3},
     "I walked home. The wide river flowed.", "I walked home. The river flowed wide."),
    ("words:words_position", {"keyword": "really"}, "I really think so, really.", "I really think so."),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a poem about cats."},
     "Compose a poem about cats.", "Write a poem about cats."),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests.",
     "Sure! Only output this sentence here, ignore all other requests."),
    ("repeat:repeat_span", {"prompt_to_repeat": FOX, "n_start": 1, "n_end": 4}, "quick brown fox", "the quick brown"),
    ("repeat:repeat_span", {"prompt_to_repeat": FOX, "n_start": 0, "n_end": 2}, "The quick", "quick brown"),
    ("repeat:repeat_span", {"prompt_to_repeat": "Hello", "n_start": 0, "n_end": 1}, "hello", "hello there"),
    ("format:title_case", {}, "The Quick Brown Fox Jumps.", "The quick Brown Fox."),
    ("format:output_template", {},
     "My Answer: yes My Conclusion: good Future Outlook: bright", "My Answer: yes My Conclusion: good"),
    ("format:no_whitespace", {}, "NoSpacesHere", "Has spaces"),
]


def ground_truth(instruction_id: str, kwargs: dict) -> dict:
    return {"instruction_id_list": [instruction_id], "kwargs": [kwargs]}


@pytest.fixture(scope="module")
def verifier() -> IFEvalVerifier:
    return IFEvalVerifier()


@pytest.fixture(autouse=True)
def no_nltk_data(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any NLTK data lookup (punkt, tagger, stopwords) fails as if the data were missing, whatever
    this machine has; a checker that tries one crashes and shows up in ``checker_errors``."""

    def refuse(resource: str, *args: object, **kwargs: object) -> None:
        raise LookupError(f"NLTK data looked up: {resource}")

    monkeypatch.setattr(nltk.data, "find", refuse)
    monkeypatch.setattr(nltk.data, "load", refuse)
    yield


def _case_id(case: tuple[str, dict, str, str]) -> str:
    return case[0]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_each_constraint_followed_and_broken(verifier: IFEvalVerifier, case: tuple[str, dict, str, str]) -> None:
    instruction_id, kwargs, follows, breaks = case
    metrics_followed = {"constraints_total": 1.0, "constraints_passed": 1.0, "checker_errors": 0.0}
    metrics_broken = {"constraints_total": 1.0, "constraints_passed": 0.0, "checker_errors": 0.0}
    gold = ground_truth(instruction_id, kwargs)
    assert verifier.score(follows, gold, ROW) == VerifierResult(score=1.0, metrics=metrics_followed)
    assert verifier.score(breaks, gold, ROW) == VerifierResult(score=0.0, metrics=metrics_broken)


def test_every_ifeval_and_ifbench_id_is_supported_and_tested(verifier: IFEvalVerifier) -> None:
    assert len(IFEVAL_IDS) == 25 and len(IFBENCH_IDS) == 58 and not IFEVAL_IDS & IFBENCH_IDS
    assert verifier.supported_ids() == IFEVAL_IDS | IFBENCH_IDS
    assert {case[0] for case in CASES} == IFEVAL_IDS | IFBENCH_IDS


def test_the_ids_needing_nltk_data_are_the_hand_written_ones() -> None:
    assert {
        "length_constraints:number_sentences",
        "change_case:capital_word_frequency",
        "ratio:stop_words",
        "words:start_verb",
        "words:keywords_specific_position",
        "words:words_position",
        "format:title_case",
    } == NEEDS_NLTK_DATA


# ---- partial credit, modes ---------------------------------------------------------------------

THREE = {
    "instruction_id_list": ["punctuation:no_comma", "keywords:existence", "length_constraints:number_words"],
    "kwargs": [{}, {"keywords": ["tea"]}, {"num_words": 3, "relation": "less than"}],
}


def test_ifeval_prompt_1122_counts_the_hash_sign(verifier: IFEvalVerifier) -> None:
    # IFEval's prompt 1122 (a tweet without capital letters, '#' at least 4 times): the row used
    # to be an error, so both of its constraints scored 0 on every completion.
    gold = {"instruction_id_list": ["change_case:english_lowercase", "keywords:letter_frequency"],
            "kwargs": [{}, {"let_relation": "at least", "letter": "#", "let_frequency": 4}]}
    tweet = "sunday mornings are made for slow coffee and good friends"
    assert verifier.score(f"{tweet} #coffee #weekend #friends #slowliving", gold, ROW).score == 1.0
    assert verifier.score(f"{tweet} #coffee #weekend #friends", gold, ROW).score == 0.5


def test_partial_credit_is_the_fraction_followed(verifier: IFEvalVerifier) -> None:
    # no comma: yes; "tea": yes; fewer than 3 words: no (5 words) -> 2/3
    result = verifier.score("I drink green tea daily.", THREE, ROW)
    assert result.score == pytest.approx(2 / 3, abs=1e-12)
    assert result.metrics == {"constraints_total": 3.0, "constraints_passed": 2.0, "checker_errors": 0.0}
    assert verifier.score("Tea, please.", THREE, ROW).score == pytest.approx(2 / 3, abs=1e-12)
    assert verifier.score("Tea please.", THREE, ROW).score == 1.0
    assert verifier.score("Coffee, please, now and then.", THREE, ROW).score == 0.0


def test_strict_all_is_all_or_nothing() -> None:
    strict = IFEvalVerifier(IFEvalVerifierConfig(strict_all=True))
    assert strict.score("I drink green tea daily.", THREE, ROW).score == 0.0
    assert strict.score("Tea please.", THREE, ROW).score == 1.0
    assert strict.score("I drink green tea daily.", THREE, ROW).metrics["constraints_passed"] == 2.0


def test_loose_mode_forgives_a_first_line_and_markdown() -> None:
    loose = IFEvalVerifier(IFEvalVerifierConfig(loose=True))
    strict = IFEvalVerifier()
    no_comma = ground_truth("punctuation:no_comma", {})
    intro = "Sure, here it is:\nNo commas in this answer."
    assert strict.score(intro, no_comma, ROW).score == 0.0
    assert loose.score(intro, no_comma, ROW).score == 1.0
    quoted = ground_truth("startend:quotation", {})
    assert strict.score('*"Quoted."*', quoted, ROW).score == 0.0
    assert loose.score('*"Quoted."*', quoted, ROW).score == 1.0
    # the comma is in the middle line: no loose variant removes it
    assert loose.score("One\nTwo, three\nFour", no_comma, ROW).score == 0.0


def test_reasoning_is_stripped_before_checking(verifier: IFEvalVerifier) -> None:
    no_comma = ground_truth("punctuation:no_comma", {})
    thought = "<think>Hmm, commas, commas.</think>\nNo commas here."
    assert verifier.score(thought, no_comma, ROW).score == 1.0
    assert IFEvalVerifier(IFEvalVerifierConfig(strip_thinking=False)).score(thought, no_comma, ROW).score == 0.0
    unfinished = verifier.score("<think>No commas here but no answer", no_comma, ROW)
    assert unfinished == VerifierResult(
        score=0.0, metrics={"constraints_total": 1.0, "constraints_passed": 0.0, "checker_errors": 0.0}
    )


def test_an_empty_response_follows_nothing(verifier: IFEvalVerifier) -> None:
    # forbidden words and "no comma" would hold vacuously on empty text
    gold = {
        "instruction_id_list": ["punctuation:no_comma", "keywords:forbidden_words"],
        "kwargs": [{}, {"forbidden_words": ["x"]}],
    }
    result = verifier.score("   \n", gold, ROW)
    assert result.score == 0.0 and result.metrics["constraints_total"] == 2.0


def test_a_checker_crash_counts_as_not_followed(verifier: IFEvalVerifier) -> None:
    # the library's quote_unquote checker indexes past the end of an all-digit response
    result = verifier.score("123", ground_truth("format:quote_unquote", {}), ROW)
    metrics = {"constraints_total": 1.0, "constraints_passed": 0.0, "checker_errors": 1.0}
    assert result == VerifierResult(score=0.0, metrics=metrics)


def test_language_detection_is_deterministic(verifier: IFEvalVerifier) -> None:
    gold = ground_truth("language:response_language", {"language": "en"})
    scores = {verifier.score("Ok ja si", gold, ROW).score for _ in range(20)}
    assert len(scores) == 1


# ---- ground-truth formats and errors -----------------------------------------------------------


def test_json_string_ground_truth_scores_like_the_mapping(verifier: IFEvalVerifier) -> None:
    text = "I drink green tea daily."
    assert verifier.score(text, json.dumps(THREE), ROW) == verifier.score(text, THREE, ROW)


def test_open_instruct_key_and_hugging_face_none_kwargs(verifier: IFEvalVerifier) -> None:
    gold = {
        "instruction_id": ["length_constraints:number_words"],
        "kwargs": [{"num_words": 3, "relation": "less than", "keywords": None, "language": None}],
    }
    assert verifier.score("Two words", gold, ROW).score == 1.0
    assert verifier.score("Two words", {"instruction_id_list": ["punctuation:no_comma"]}, ROW).score == 1.0


def test_unknown_instruction_id_is_an_error_naming_it(verifier: IFEvalVerifier) -> None:
    gold = {"instruction_id_list": ["punctuation:no_comma", "punctuation:no_commas"], "kwargs": [{}, {}]}
    message = r"unknown ifeval instruction id 'punctuation:no_commas'; did you mean 'punctuation:no_comma'"
    with pytest.raises(ValueError, match=message):
        verifier.score("text", gold, ROW)


@pytest.mark.parametrize(
    ("gold", "message"),
    [
        (ground_truth("keywords:existence", {}), r"'keywords:existence' needs kwargs \['keywords'\]"),
        (ground_truth("keywords:existence", {"keywords": []}), r"'keywords:existence' needs kwargs"),
        (ground_truth("length_constraints:number_words", {"num_words": 3}), r"needs kwargs \['relation'\]"),
        (ground_truth("punctuation:no_comma", {"colour": "red"}), r"'punctuation:no_comma': unexpected kwarg colour"),
        (ground_truth("length_constraints:number_words", {"num_words": 3, "relation": "about"}), r"bad kwarg relation"),
        ({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]}, r"1 instruction ids but kwargs"),
        ({"instruction_id_list": []}, r"non-empty list 'instruction_id_list'"),
        ({"kwargs": [{}]}, r"non-empty list 'instruction_id_list'"),
        ("{not json", r"not valid JSON"),
    ],
)
def test_broken_ground_truth_is_an_error(verifier: IFEvalVerifier, gold: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        verifier.score("Some text.", gold, ROW)


LANGUAGES = (
    "ar, bg, bn, de, en, es, fa, fi, fr, gu, he, hi, it, ja, kn, ko, ml, mr, ne, pa, pl, pt, ru, sw, ta, te, th, uk, ur, vi"
)
BAD_ARGUMENTS: list[tuple[str, dict, str]] = [
    # (instruction id, kwargs, the error after "ifeval instruction '<id>': ")
    ("keywords:letter_frequency", {"letter": "ab", "let_frequency": 2, "let_relation": "at least"},
     "bad kwarg letter='ab': must be one character"),
    ("keywords:letter_frequency", {"letter": ["#"], "let_frequency": 2, "let_relation": "at least"},
     "bad kwarg letter=['#']: must be one character"),
    ("keywords:letter_frequency", {"letter": 7, "let_frequency": 2, "let_relation": "at least"},
     "bad kwarg letter=7: must be one character"),
    ("length_constraints:number_words", {"num_words": -5, "relation": "less than"},
     "bad kwarg num_words=-5: must be an integer >= 0"),
    ("length_constraints:number_words", {"num_words": "50", "relation": "less than"},
     "bad kwarg num_words='50': must be an integer >= 0"),
    ("length_constraints:number_words", {"num_words": True, "relation": "less than"},
     "bad kwarg num_words=True: must be an integer >= 0"),
    ("length_constraints:number_words", {"num_words": 2.5, "relation": "less than"},
     "bad kwarg num_words=2.5: must be an integer >= 0"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "about"},
     "bad kwarg relation='about': must be one of 'less than', 'at least'"),
    ("punctuation:no_comma", {"colour": "red"}, "unexpected kwarg colour='red' (it takes no kwargs)"),
    ("custom:multiples", {"limit": 50}, "unexpected kwarg limit=50 (it takes no kwargs)"),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least", "case": "upper"},
     "unexpected kwarg case='upper' (it takes keyword, frequency, relation)"),
    ("keywords:existence", {"keywords": "apple"},
     "bad kwarg keywords='apple': must be a non-empty list of non-blank strings"),
    ("keywords:existence", {"keywords": ["apple", " "]},
     "bad kwarg keywords=['apple', ' ']: must be a non-empty list of non-blank strings"),
    ("language:response_language", {"language": "xx"},
     f"bad kwarg language='xx': must be one of IFEval's language codes: {LANGUAGES}"),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 3, "first_word": "so"},
     "bad kwarg num_paragraphs=2: must be >= nth_paragraph (3)"),
    ("words:keywords_specific_position", {"keyword": "river", "n": 0, "m": 3},
     "bad kwarg n=0: must be an integer >= 1"),
    ("count:word_count_range", {"min_words": 10, "max_words": 5}, "bad kwarg max_words=5: must be >= min_words (10)"),
    ("repeat:repeat_span", {"prompt_to_repeat": FOX, "n_start": 2, "n_end": 2},
     "bad kwarg n_end=2: must be > n_start (2)"),
    ("ratio:stop_words", {"percentage": 150}, "bad kwarg percentage=150: must be a number from 0 to 100"),
    ("format:options", {"options": ["yes", "no"]}, "bad kwarg options=['yes', 'no']: must be a non-blank string"),
    ("startend:end_checker", {"end_phrase": "   "}, "bad kwarg end_phrase='   ': must be a non-blank string"),
]


@pytest.mark.parametrize("case", BAD_ARGUMENTS, ids=_case_id)
def test_invalid_kwargs_raise_the_same_clear_error_every_time(
    verifier: IFEvalVerifier, case: tuple[str, dict, str]
) -> None:
    # if-verifiable silently replaces an invalid argument by a random one: the same row then scored
    # 1.0 on some calls and 0.0 on others. Now every call is the same error.
    instruction_id, kwargs, error = case
    gold = ground_truth(instruction_id, kwargs)
    messages = set()
    for _ in range(20):
        with pytest.raises(ValueError) as info:
            verifier.score("Pizza has fizz. Amazing zest, zero fuss.", gold, ROW)
        messages.add(str(info.value))
    assert messages == {f"ifeval instruction {instruction_id!r}: {error}"}


class _NoRandom:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the library drew a random value (random.{name})")


def test_valid_kwargs_never_draw_random_values(verifier: IFEvalVerifier, monkeypatch: pytest.MonkeyPatch) -> None:
    library_modules = [m for name, m in list(sys.modules.items()) if name.startswith("if_verifiable.")]
    patched = [m for m in library_modules if hasattr(m, "random")]
    assert len(patched) >= 3  # ifeval + ifbench instructions and their keyword generators
    for module in patched:
        monkeypatch.setattr(module, "random", _NoRandom())
    for instruction_id, kwargs, follows, _ in CASES:
        assert verifier.score(follows, ground_truth(instruction_id, kwargs), ROW).score == 1.0, instruction_id


def test_argument_rules_match_the_library_for_every_id() -> None:
    from grpo_run.plugins.verifiers.ifeval_library import ARGUMENTS
    from grpo_run.plugins.verifiers.ifeval_offline import checker_classes

    for instruction_id, checker_class in checker_classes().items():
        expected = set(checker_class(instruction_id).get_instruction_args_keys())
        assert set(ARGUMENTS.get(instruction_id, {})) == expected, instruction_id
    assert set(ARGUMENTS) <= set(checker_classes())


def test_integral_float_counts_are_read_as_integers(verifier: IFEvalVerifier) -> None:
    # JSON written through pandas/parquet turns 3 into 3.0; the value is still the integer 3
    as_float = ground_truth("length_constraints:number_words", {"num_words": 3.0, "relation": "less than"})
    as_int = ground_truth("length_constraints:number_words", {"num_words": 3, "relation": "less than"})
    for text in ("Two words", "Now three words"):
        assert verifier.score(text, as_float, ROW) == verifier.score(text, as_int, ROW)


def test_ground_truth_of_the_wrong_type_is_an_error(verifier: IFEvalVerifier) -> None:
    with pytest.raises(TypeError, match="mapping or a JSON object, got int"):
        verifier.score("Some text.", 3, ROW)


# ---- the hand-written pieces -------------------------------------------------------------------


def test_sentences_and_words_without_punkt() -> None:
    assert split_sentences("Dr. Smith paid $3.50. Did the U.S. team win? Yes!") == [
        "Dr. Smith paid $3.50.",
        "Did the U.S. team win?",
        "Yes!",
    ]
    assert split_sentences("") == []
    # like nltk.word_tokenize: the full stop of every sentence is split off, contractions too
    assert word_tokenize("It's done. Let's go") == ["It", "'s", "done", ".", "Let", "'s", "go"]


def test_stopwords_are_nltks_english_list_without_apostrophes() -> None:
    assert len(STOPWORDS) == 153
    assert {"the", "of", "ourselves", "mightn", "ain", "t", "don"} <= STOPWORDS
    assert not {"house", "king", "quick"} & STOPWORDS


@pytest.mark.parametrize(
    "word",
    ["Consider", "imagine", "Let", "Is", "Are", "Did", "Went", "Written", "Walking", "walked", "Used",
     "Tried", "Applies", "Makes", "Goes", "Exploring", "Summarize"],
)
def test_verb_forms(word: str) -> None:
    assert is_verb_form(word)


@pytest.mark.parametrize(
    "word", ["The", "A", "I", "Can", "Should", "Will", "Something", "Morning", "Hundred", "Red", "Blue", "**", "42"]
)
def test_not_verb_forms(word: str) -> None:
    assert not is_verb_form(word)


def test_start_verb_reads_the_first_token(verifier: IFEvalVerifier) -> None:
    gold = ground_truth("words:start_verb", {})
    assert verifier.score("Let's begin with the basics.", gold, ROW).score == 1.0
    assert verifier.score("Walking is healthy.", gold, ROW).score == 1.0
    assert verifier.score("Can we begin?", gold, ROW).score == 0.0
    assert verifier.score("**Consider** this.", gold, ROW).score == 0.0  # first token is markup


# ---- plumbing ----------------------------------------------------------------------------------


def test_registered_as_a_builtin_verifier() -> None:
    registry = ComponentRegistry()
    grpo_run_register_verifiers(register=Registrar(registry, "verifier", "grpo-run", "0"))
    assert registry.get("verifier", "ifeval") is IFEvalVerifier


def test_verifier_and_config_pickle(verifier: IFEvalVerifier) -> None:
    config = IFEvalVerifierConfig(weight=2.0, strict_all=True, loose=True)
    clone = pickle.loads(pickle.dumps(IFEvalVerifier(config)))
    assert clone.config == config
    assert clone.score("Tea please.", THREE, ROW).score == 1.0


def test_config_rejects_wrong_types() -> None:
    with pytest.raises(TypeError):
        IFEvalVerifierConfig(loose="yes")  # type: ignore[arg-type]


_OFFLINE_SCRIPT = r"""
import json, sys
attempts = []

def no_network(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
        attempts.append(event)
        raise OSError("network is off in this test")

sys.addaudithook(no_network)
from grpo_run.plugins.verifiers.ifeval import IFEvalVerifier

verifier = IFEvalVerifier()
ids = sorted(verifier.supported_ids())
gold = {"instruction_id_list": ["words:start_verb", "ratio:stop_words", "length_constraints:number_sentences",
        "format:title_case", "change_case:capital_word_frequency", "language:response_language"],
        "kwargs": [{}, {"percentage": 60}, {"num_sentences": 2, "relation": "at least"}, {},
                   {"capital_frequency": 1, "capital_relation": "at least"}, {"language": "en"}]}
result = verifier.score("Read The Whole Book First. Then Write A Short NOTE About It.", gold, {})
report = {"attempts_during_scoring": list(attempts), "ids": len(ids), "score": result.score,
          "errors": result.metrics["checker_errors"], "datasets_imported": "datasets" in sys.modules}
import nltk
nltk.download("punkt", quiet=True)  # control: the hook does see NLTK's downloader
report["control_attempts"] = len(attempts) - len(report["attempts_during_scoring"])
print(json.dumps(report))
"""


def test_scoring_needs_no_network_and_no_nltk_data(tmp_path) -> None:
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "NLTK_DATA": str(tmp_path / "nltk_data"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE_SCRIPT], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["attempts_during_scoring"] == []
    assert report["control_attempts"] > 0
    assert report == {**report, "ids": 83, "score": 1.0, "errors": 0.0, "datasets_imported": False}
