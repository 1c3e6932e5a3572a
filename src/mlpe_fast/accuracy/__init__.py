"""Accuracy scoring: pure functions over (model outputs, ground truths), spec §2.6.

* :mod:`.scorers` -- the reference client's ``eval_method`` and ``extractor``
  names mapped to our functions, :func:`~.scorers.exact_match`, and every
  public name below re-exported;
* :mod:`.rouge` -- ROUGE-1/2/L/Lsum, ``gen_len``, ``gen_num`` (Llama 3.1 8B,
  CNN/DailyMail), with NLTK's English sentence split;
* :mod:`.extract` -- answer extraction: GPQA letters, boxed answers;
* :mod:`.math_answers` -- the PRM800K grader MLPerf uses for MATH500;
* :mod:`.deepseek_r1` -- MLPerf's per-subset grading of the DeepSeek-R1 set;
* :mod:`.gates` -- the §2.6 thresholds and :func:`~.gates.check_gate`;
* :mod:`.agentic_gates` -- the agentic models' gates: inline accuracy and
  the full-run OSL per turn at every point, SWE-bench on the bands' mean;
* :mod:`.results` -- one ``accuracy_results.json`` entry per dataset of a run;
* :mod:`.rescore` -- ``mlpe-fast score``: the same from a finished run's log;
* :mod:`.agentic_inline` -- the inline accuracy of an agentic run (the
  ``performance`` entry and ``scores.json``);
* :mod:`.swe_bench` -- SWE-bench through an external scoring service (its
  v1 API, the client side);
* :mod:`.livecodebench` -- LiveCodeBench pass@1: programs run in
  :mod:`.sandbox` under :mod:`.lcb_harness`, or by the reference's service
  (:mod:`.lcb_service` over :mod:`.websocket`).

The heavy libraries (``rouge-score``/NLTK, ``sympy``, ``pylatexenc``) load
on first use, so a run without an accuracy phase never imports them.
"""
