"""split_sentences: the one splitter shared by CLIP relevance and the CSR loop."""
from evalsuite.text import split_sentences


def test_basic_terminators():
    assert split_sentences("A cat sits on a mat. A dog runs! Is it red? Yes.") == [
        "A cat sits on a mat.", "A dog runs!", "Is it red?", "Yes.",
    ]


def test_empty_and_contentless():
    """'' and whitespace give no sentence; pieces with no letter/digit ('...', '-') are dropped."""
    assert split_sentences("") == []
    assert split_sentences("   \n\t ") == []
    assert split_sentences("... - !") == []
    assert split_sentences("A red cube. ...") == ["A red cube."]


def test_no_trailing_punctuation_and_extra_spaces():
    assert split_sentences("  A cat.   Two dogs  ") == ["A cat.", "Two dogs"]


def test_decimals_and_abbreviations_do_not_split():
    text = "It is 3.5 m tall, e.g. a tree. Mr. Smith waves. The time is 10 a.m now."
    assert split_sentences(text) == ["It is 3.5 m tall, e.g. a tree.", "Mr. Smith waves.", "The time is 10 a.m now."]


def test_newlines_and_list_markers():
    """Each line is split on its own; '- ', '* ', '1. ', '2) ' markers are formatting and dropped."""
    text = "Objects:\n1. A red cube\n2) A blue ball. It is small.\n- a green cone\n\n* last"
    assert split_sentences(text) == [
        "Objects:", "A red cube", "A blue ball.", "It is small.", "a green cone", "last",
    ]


def test_runs_of_punctuation_and_closing_quotes():
    assert split_sentences('He said "stop." Then... he left?! Fine (really.) Done') == [
        'He said "stop."', "Then...", "he left?!", "Fine (really.)", "Done",
    ]


def test_etc_ends_a_sentence():
    assert split_sentences("Plates, cups, etc. The table is wood.") == ["Plates, cups, etc.", "The table is wood."]


def test_joined_sentences_round_trip_content():
    """Splitting keeps every word: the words of the sentences are the words of the text (no markers)."""
    text = "A man rides a horse. The sky is blue! Trees stand behind him?"
    assert " ".join(split_sentences(text)).split() == text.split()
