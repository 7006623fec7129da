from router.judge import AgreementJudge

Q = "Which is a prime?\nA. 4\nB. 7\nC. 9\nD. 12\nAnswer:"


def test_agreement_on_choices() -> None:
    j = AgreementJudge()
    assert j.verdict(Q, "The answer is B.", "B. 7") == 1.0
    assert j.verdict(Q, "The answer is A.", "B") == 0.0


def test_no_final_answer_is_unknown() -> None:
    j = AgreementJudge()
    assert j.verdict(Q, "", "B") is None
    assert j.verdict("Write a poem about the sea.", "Waves roll on.", "Blue deep water.") is None
