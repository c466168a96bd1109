"""Builds ``benchmarks/data/exact_words_pairs.jsonl``: hand-written claims against real
MedQuAD passages, for ``benchmarks/bench_exact_words.py``.

``SPECS`` is the development set (the checks were tuned until they passed it);
``HELD_OUT`` was written afterwards and measured without changing the checks (then 3 of
its 7 misses were fixed); ``HELD_OUT_2`` was written after those fixes. Each spec is
(MedQuAD document id, an anchor string of one of its sentences, a claim written for it,
the kind it exercises, and the label). The passage is the sentence holding the anchor with
the sentence before and after it (line breaks kept, whitespace folded), taken from
``src/medverify/data/medquad_sample.jsonl``, which ships with medverify. A ``mismatch``
claim plants exactly one difference of its kind (a count or frequency, a frequency word, a
direction, a disease/organism/vaccine); a ``match`` claim says what the passage says in
other words. The build fails if an anchor is not found, or if a mismatch claim's planted
word (``planted``) is in the passage.

    .venv/bin/python benchmarks/data/exact_words_build.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from medverify.judge.checks.text import sentence_char_spans

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "src" / "medverify" / "data" / "medquad_sample.jsonl"
OUT = Path(__file__).resolve().parent / "exact_words_pairs.jsonl"

SH = "medquad:NIHSeniorHealth:0000062"
HY = "medquad:NIDDK:0000009"
RB = "medquad:CDC:0000342"

# (doc id, anchor, claim, kind, label, planted word that must be absent for a mismatch)
SPECS: list[tuple[str, str, str, str, str, str]] = [
    # ------------------------------------------------------------------ number: counts
    (SH, "only a single dose is recommended",
     "Two doses of the vaccine are recommended.", "number", "mismatch", "two"),
    (SH, "only a single dose is recommended",
     "2 doses of the vaccine are recommended.", "number", "mismatch", "2 doses"),
    (SH, "only a single dose is recommended",
     "Three doses of the vaccine are recommended at any age.", "number", "mismatch", "three"),
    (SH, "only a single dose is recommended",
     "Only one dose of the vaccine is recommended.", "number", "match", ""),
    (SH, "only a single dose is recommended",
     "A single dose of the vaccine is recommended, with no maximum age.", "number", "match", ""),
    ("medquad:NIDDK:0000214", "Take a single dose of an antibiotic after sexual",
     "Take two doses of an antibiotic after sexual intercourse.", "number", "mismatch", "two"),
    ("medquad:NIDDK:0000214", "Take a single dose of an antibiotic after sexual",
     "Take one dose of an antibiotic after sexual intercourse.", "number", "match", ""),
    (SH, "getting a one-time dose of the shingles vaccine",
     "Adults 60 years old or older should get three doses of the shingles vaccine.", "number",
     "mismatch", "three"),
    # ------------------------------------------------------------- number: frequencies
    ("medquad:NIHSeniorHealth:0000029", "Specifically, you should - brush your teeth twice a day",
     "Brush your teeth once a day with a fluoride toothpaste.", "number", "mismatch", "once"),
    ("medquad:NIHSeniorHealth:0000029", "Specifically, you should - brush your teeth twice a day",
     "Brush your teeth two times a day with a fluoride toothpaste.", "number", "match", ""),
    ("medquad:NIDDK:0000016", "two or three times a week",
     "A health care provider usually injects EPO once a day.", "number", "mismatch", "once"),
    ("medquad:NIDDK:0000016", "two or three times a week",
     "A health care provider usually injects EPO two or three times a week.", "number",
     "match", ""),
    ("medquad:NIDDK:0000155", "at least four times a day and sleep",
     "Most people change the dialysis solution once a day.", "number", "mismatch", "once"),
    ("medquad:NIDDK:0000155", "at least four times a day and sleep",
     "Most people change the dialysis solution at least four times a day.", "number", "match",
     ""),
    ("medquad:NIDDK:0000155", "You must perform exchanges four to six times a day",
     "You must perform exchanges twice a week.", "number", "mismatch", "twice"),
    ("medquad:NIDDK:0000155", "You must perform exchanges four to six times a day",
     "Exchanges must be performed four to six times a day, every day.", "number", "match", ""),
    ("medquad:NIDDK:0000002", "taken orally one to three times each day",
     "Cortisol is replaced with a corticosteroid such as hydrocortisone taken orally once a "
     "week.", "number", "mismatch", "week"),
    ("medquad:NIDDK:0000002", "taken orally one to three times each day",
     "Cortisol is replaced with a corticosteroid such as hydrocortisone, taken orally one to "
     "three times a day.", "number", "match", ""),
    ("medquad:NIDDK:0000002", "taken once or twice daily",
     "Fludrocortisone acetate (Florinef) is taken four times daily.", "number", "mismatch",
     "four"),
    ("medquad:NIDDK:0000002", "taken once or twice daily",
     "Fludrocortisone acetate (Florinef) is taken once or twice a day.", "number", "match", ""),
    (HY, "normally repeated in 6 months and then once a year",
     "Once a stable dose is reached, blood tests are repeated once a month.", "number",
     "mismatch", "once a month"),
    (HY, "normally repeated in 6 months and then once a year",
     "Once a stable dose is reached, blood tests are repeated in 6 months and then once a "
     "year.", "number", "match", ""),
    ("medquad:NIHSeniorHealth:0000035", "checked at least once every 5 years",
     "Everyone age 20 and older should have their cholesterol checked every 10 years.",
     "number", "mismatch", "10 years"),
    ("medquad:NIHSeniorHealth:0000035", "checked at least once every 5 years",
     "Everyone age 20 and older should have their cholesterol levels checked at least once "
     "every five years.", "number", "match", ""),
    ("medquad:NIDDK:0000003", "by mouth every 6 hours for 2 days",
     "In the LDDST, dexamethasone is given by mouth once a day for 2 days.", "number",
     "mismatch", "once a day"),
    ("medquad:NIDDK:0000003", "by mouth every 6 hours for 2 days",
     "In the LDDST, a low dose of dexamethasone is given by mouth four times a day for 2 days.",
     "number", "match", ""),
    ("medquad:CancerGov:0000024_1", "once a month in the first year",
     "Follow-up for hypopharyngeal cancer should include careful head and neck exams once a "
     "week in the first year after treatment ends.", "number", "mismatch", "once a week"),
    ("medquad:CancerGov:0000024_1", "once a month in the first year",
     "Follow-up for hypopharyngeal cancer should include careful head and neck exams every "
     "month in the first year after treatment ends.", "number", "match", ""),
    ("medquad:NIDDK:0000182", "with a daily dose of a corticosteroid called prednisone",
     "Health care providers treat autoimmune hepatitis with a weekly dose of prednisone.",
     "number", "mismatch", "weekly"),
    ("medquad:NIDDK:0000182", "with a daily dose of a corticosteroid called prednisone",
     "Health care providers treat autoimmune hepatitis with a daily dose of the corticosteroid "
     "prednisone.", "number", "match", ""),
    ("medquad:NIDDK:0000214", "Take low doses of the prescribed antibiotic daily",
     "Take low doses of the prescribed antibiotic twice a week for 6 months or longer.",
     "number", "mismatch", "twice"),
    ("medquad:NIDDK:0000214", "Take low doses of the prescribed antibiotic daily",
     "Take a low dose of the prescribed antibiotic every day for 6 months or longer.",
     "number", "match", ""),
    (HY, "as long as the recommended dose is taken every day",
     "Hypothyroidism can be controlled with synthetic thyroxine if the recommended dose is "
     "taken once a week.", "number", "mismatch", "week"),
    (HY, "as long as the recommended dose is taken every day",
     "Hypothyroidism can almost always be controlled with synthetic thyroxine if the "
     "recommended dose is taken daily.", "number", "match", ""),
    (SH, "the vaccine reduced the risk of shingles by about half",
     "In a clinical trial, the vaccine reduced the risk of shingles by about 90 percent.",
     "number", "mismatch", "90"),
    (SH, "the vaccine reduced the risk of shingles by about half",
     "In a clinical trial of adults 60 years old or older, the vaccine reduced the risk of "
     "shingles by about 50 percent.", "number", "match", ""),
    ("medquad:CDC:0000438", "booster dose of yellow fever vaccine after 10 years",
     "People who live in yellow fever-endemic areas should receive two booster doses of "
     "yellow fever vaccine after 10 years.", "number", "mismatch", "two"),
    ("medquad:CDC:0000438", "booster dose of yellow fever vaccine after 10 years",
     "People who continue to live in yellow fever-endemic areas should receive a booster dose "
     "of yellow fever vaccine after 10 years.", "number", "match", ""),
    # ------------------------------------------------------------------ frequency words
    (RB, "are almost never found to be infected with rabies",
     "Squirrels, hamsters and rabbits are a common cause of rabies in humans in the United "
     "States.", "frequency", "mismatch", "common"),
    (RB, "are almost never found to be infected with rabies",
     "Squirrels, rats, hamsters and rabbits are often found to be infected with rabies.",
     "frequency", "mismatch", "often"),
    (RB, "are almost never found to be infected with rabies",
     "Small mammals such as squirrels, hamsters and rabbits are rarely found to be infected "
     "with rabies.", "frequency", "match", ""),
    ("medquad:GARD:0000660", "Baylisascaris infection in humans is uncommon",
     "Baylisascaris infection in humans is common.", "frequency", "mismatch", "common"),
    ("medquad:GARD:0000660", "Baylisascaris infection in humans is uncommon",
     "Baylisascaris infection in humans is rare but can be severe.", "frequency", "match", ""),
    ("medquad:GARD:0002669", "are commonly found in lakes, swimming pools",
     "Acanthamoeba species are rarely found in lakes and swimming pools.", "frequency",
     "mismatch", "rarely"),
    ("medquad:GARD:0002669", "are commonly found in lakes, swimming pools",
     "Acanthamoeba species are often found in lakes, swimming pools and tap water.",
     "frequency", "match", ""),
    ("medquad:CancerGov:0000001_4", "and rarely occurs in children",
     "Chronic myelogenous leukemia often occurs in children.", "frequency", "mismatch",
     "often"),
    ("medquad:CancerGov:0000001_4", "and rarely occurs in children",
     "Chronic myelogenous leukemia usually occurs during or after middle age.", "frequency",
     "match", ""),
    ("medquad:CancerGov:0000024_1", "because early signs and symptoms rarely occur",
     "Early signs and symptoms of hypopharyngeal cancer often occur.", "frequency",
     "mismatch", "often"),
    ("medquad:CancerGov:0000024_1", "because early signs and symptoms rarely occur",
     "Hypopharyngeal cancer is usually detected in later stages.", "frequency", "match", ""),
    ("medquad:CancerGov:0000010_1", "GI carcinoid tumors are rare and most grow",
     "GI carcinoid tumors are common.", "frequency", "mismatch", "common"),
    ("medquad:CancerGov:0000010_1", "GI carcinoid tumors are rare and most grow",
     "GI carcinoid tumors are rare and most of them grow very slowly.", "frequency", "match",
     ""),
    ("medquad:CancerGov:0000020_1", "Gallbladder cancer is a rare disease",
     "Gallbladder cancer is a common disease.", "frequency", "mismatch", "common"),
    ("medquad:CancerGov:0000020_1", "Gallbladder cancer is a rare disease",
     "Gallbladder cancer is a rare disease of the gallbladder tissues.", "frequency", "match",
     ""),
    ("medquad:CancerGov:0000031_2", "Neuroblastoma often begins in the nerve tissue",
     "Neuroblastoma rarely begins in the nerve tissue of the adrenal glands.", "frequency",
     "mismatch", "rarely"),
    ("medquad:CancerGov:0000031_2", "Neuroblastoma often begins in the nerve tissue",
     "Neuroblastoma frequently begins in the nerve tissue of the adrenal glands.",
     "frequency", "match", ""),
    ("medquad:CancerGov:0000027_2", "Men with breast cancer usually have lumps",
     "Men with breast cancer seldom have lumps that can be felt.", "frequency", "mismatch",
     "seldom"),
    ("medquad:CancerGov:0000027_2", "Men with breast cancer usually have lumps",
     "Men with breast cancer typically have lumps that can be felt.", "frequency", "match",
     ""),
    ("medquad:GHR:0000672", "Rarely, affected children develop liver cancer",
     "Affected children commonly develop liver cancer.", "frequency", "mismatch", "commonly"),
    ("medquad:GHR:0000672", "Rarely, affected children develop liver cancer",
     "Affected children rarely develop liver cancer.", "frequency", "match", ""),
    ("medquad:GHR:0000546", "skin bumps that frequently appear on the hands",
     "In juvenile hyaline fibromatosis, skin bumps rarely appear on the hands and neck.",
     "frequency", "mismatch", "rarely"),
    ("medquad:GHR:0000546", "skin bumps that frequently appear on the hands",
     "Juvenile hyaline fibromatosis causes skin bumps that often appear on the hands, neck "
     "and scalp.", "frequency", "match", ""),
    ("medquad:GHR:0000755", "often becomes evident in the first few days of life",
     "Ornithine transcarbamylase deficiency seldom becomes evident in the first few days of "
     "life.", "frequency", "mismatch", "seldom"),
    ("medquad:GHR:0000755", "often becomes evident in the first few days of life",
     "Ornithine transcarbamylase deficiency frequently becomes evident in the first days of "
     "life.", "frequency", "match", ""),
    ("medquad:MPlusHealthTopics:0000780", "Reye syndrome is a rare illness",
     "Reye syndrome is a common illness that can affect the blood, liver and brain.",
     "frequency", "mismatch", "common"),
    ("medquad:MPlusHealthTopics:0000780", "Reye syndrome is a rare illness",
     "Reye syndrome is an uncommon illness that can affect the blood, liver, and brain.",
     "frequency", "match", ""),
    (HY, "Hypothyroidism can almost always be completely controlled",
     "Hypothyroidism can rarely be controlled with synthetic thyroxine.", "frequency",
     "mismatch", "rarely"),
    (HY, "Hypothyroidism can almost always be completely controlled",
     "Hypothyroidism can nearly always be completely controlled with synthetic thyroxine.",
     "frequency", "match", ""),
    (SH, "Vaccine side effects are usually mild and temporary",
     "Vaccine side effects are seldom mild and temporary.", "frequency", "mismatch",
     "seldom"),
    (SH, "Vaccine side effects are usually mild and temporary",
     "Side effects of the vaccine are usually mild and temporary.", "frequency", "match", ""),
    (SH, "People who develop shingles usually have only one episode",
     "People who develop shingles seldom have only one episode in their lifetime.",
     "frequency", "mismatch", "seldom"),
    (SH, "People who develop shingles usually have only one episode",
     "People who develop shingles generally have only one episode in their lifetime.",
     "frequency", "match", ""),
    ("medquad:MPlusHealthTopics:0000711", "Phobias usually start in children or teens",
     "Phobias rarely start in children or teens.", "frequency", "mismatch", "rarely"),
    ("medquad:MPlusHealthTopics:0000711", "Phobias usually start in children or teens",
     "Phobias typically start in children or teens and continue into adulthood.", "frequency",
     "match", ""),
    ("medquad:NIHSeniorHealth:0000012", "Although uncommon, some people who have asthma",
     "It is common for people who have asthma to develop COPD.", "frequency", "mismatch",
     "common for"),
    # ------------------------------------------------------------------ direction words
    (HY, "Without enough thyroid hormone, many of the bodys functions slow down",
     "Without enough thyroid hormone, many of the body's functions speed up.", "direction",
     "mismatch", "speed"),
    (HY, "Without enough thyroid hormone, many of the bodys functions slow down",
     "Without enough thyroid hormone, many body functions slow down.", "direction", "match",
     ""),
    (HY, "- depression  - slowed heart rate",
     "Hypothyroidism typically speeds up the heart rate.", "direction", "mismatch", "speed"),
    (HY, "- depression  - slowed heart rate",
     "A slowed heart rate is a common symptom of hypothyroidism.", "direction", "match", ""),
    (HY, "- fatigue  - weight gain  - a puffy face",
     "Fatigue, weight loss, a puffy face and cold intolerance are common symptoms of "
     "hypothyroidism.", "direction", "mismatch", "loss"),
    (HY, "- fatigue  - weight gain  - a puffy face",
     "Fatigue, weight gain, a puffy face and cold intolerance are common symptoms of "
     "hypothyroidism.", "direction", "match", ""),
    ("medquad:MPlusHealthTopics:0000494", "Other problems that can raise blood sugar include",
     "Infections and certain medicines can lower blood sugar.", "direction", "mismatch",
     "lower"),
    ("medquad:MPlusHealthTopics:0000494", "Other problems that can raise blood sugar include",
     "Infections, certain medicines and hormone imbalances can raise blood sugar.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000214", "produces secretions that slow bacterial growth",
     "In men, the prostate gland produces secretions that speed up bacterial growth.",
     "direction", "mismatch", "speed"),
    ("medquad:NIDDK:0000214", "produces secretions that slow bacterial growth",
     "In men, the prostate gland makes secretions that slow bacterial growth.", "direction",
     "match", ""),
    ("medquad:NIDDK:0000214", "some forms of birth control increase the risk of UTI",
     "Some forms of birth control decrease the risk of UTI.", "direction", "mismatch",
     "decrease"),
    ("medquad:NIDDK:0000214", "some forms of birth control increase the risk of UTI",
     "Some forms of birth control raise the risk of UTI.", "direction", "match", ""),
    ("medquad:NIDDK:0000107", "Fat naturally slows digestion",
     "Fat naturally speeds up digestion.", "direction", "mismatch", "speed"),
    ("medquad:NIDDK:0000107", "Fat naturally slows digestion",
     "Fat naturally slows down digestion.", "direction", "match", ""),
    ("medquad:NIDDK:0000005", "the pituitary decreases TSH production",
     "When thyroid hormone levels are high, the pituitary increases TSH production.",
     "direction", "mismatch", "increases"),
    ("medquad:NIDDK:0000005", "the pituitary decreases TSH production",
     "When thyroid hormone levels are high, the pituitary lowers TSH production.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000140", "raise blood calcium levels",
     "The parathyroid gland releases parathyroid hormone to pull calcium from the bones and "
     "lower blood calcium levels.", "direction", "mismatch", "lower blood"),
    ("medquad:NIDDK:0000140", "raise blood calcium levels",
     "The parathyroid gland releases parathyroid hormone to pull calcium from the bones and "
     "raise blood calcium levels.", "direction", "match", ""),
    ("medquad:NIDDK:0000140", "High levels of phosphorus cause lower levels of calcium",
     "High levels of phosphorus cause higher levels of calcium in the blood.", "direction",
     "mismatch", "higher"),
    ("medquad:NIDDK:0000140", "High levels of phosphorus cause lower levels of calcium",
     "High phosphorus levels cause lower calcium levels in the blood.", "direction", "match",
     ""),
    ("medquad:MPlusHealthTopics:0000113", "help slow down bone loss",
     "If you have low bone mass, there are things you can do to help speed up bone loss.",
     "direction", "mismatch", "speed"),
    ("medquad:MPlusHealthTopics:0000113", "help slow down bone loss",
     "If you have low bone mass, there are things you can do to slow bone loss.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000032", "With modest weight loss and moderate physical activity",
     "With modest weight gain and moderate physical activity, people with prediabetes can "
     "delay type 2 diabetes.", "direction", "mismatch", "gain"),
    ("medquad:NIDDK:0000032", "With modest weight loss and moderate physical activity",
     "With modest weight loss and moderate physical activity, people with prediabetes can "
     "delay or prevent type 2 diabetes.", "direction", "match", ""),
    ("medquad:NIDDK:0000182", "medication to suppress, or slow down, an overactive immune",
     "Treatment for autoimmune hepatitis includes medication to stimulate an overactive "
     "immune system.", "direction", "mismatch", "stimulate"),
    ("medquad:NIDDK:0000182", "medication to suppress, or slow down, an overactive immune",
     "Treatment for autoimmune hepatitis includes medication to suppress an overactive immune "
     "system.", "direction", "match", ""),
    ("medquad:MPlusHealthTopics:0000150", "reduces the chance of dying from a second SCA",
     "An implantable cardiac defibrillator (ICD) increases the chance of dying from a second "
     "SCA.", "direction", "mismatch", "increases"),
    ("medquad:MPlusHealthTopics:0000150", "reduces the chance of dying from a second SCA",
     "An implantable cardiac defibrillator (ICD) lowers the chance of dying from a second "
     "SCA.", "direction", "match", ""),
    ("medquad:NIDDK:0000182", "can use a lower dose of prednisone",
     "When using azathioprine, a health care provider can use a higher dose of prednisone.",
     "direction", "mismatch", "higher"),
    ("medquad:NIDDK:0000182", "can use a lower dose of prednisone",
     "When using azathioprine, a health care provider can use a lower dose of prednisone.",
     "direction", "match", ""),
    ("medquad:NINDS:0000056", "it can increase the risk of stroke in CADASIL",
     "Smoking can reduce the risk of stroke in CADASIL.", "direction", "mismatch", "reduce"),
    ("medquad:NINDS:0000056", "it can increase the risk of stroke in CADASIL",
     "Smoking can raise the risk of stroke in CADASIL, so affected people who smoke should "
     "quit.", "direction", "match", ""),
    ("medquad:NIDDK:0000034", "gradually decrease sexual response in men and women",
     "Autonomic neuropathy can gradually increase sexual response in men and women.",
     "direction", "mismatch", "increase"),
    ("medquad:NIDDK:0000034", "gradually decrease sexual response in men and women",
     "Autonomic neuropathy can gradually reduce sexual response in men and women.",
     "direction", "match", ""),
    # ------------------------------------------------------------------ entity swaps
    (SH, "approved a vaccine (Zostavax) to prevent shingles in people age 60",
     "Shingles vaccine protects against chickenpox in adults over 60.", "entity", "mismatch",
     "chickenpox"),
    (SH, "approved a vaccine (Zostavax) to prevent shingles in people age 60",
     "The vaccine protects older adults from getting measles later on.", "entity",
     "mismatch", "measles"),
    (SH, "approved a vaccine (Zostavax) to prevent shingles in people age 60",
     "A vaccine called Zostavax was approved to prevent shingles in people age 60 and older.",
     "entity", "match", ""),
    ("medquad:NIHSeniorHealth:0000012", "Flu shots can reduce your risk of getting the flu",
     "Flu shots can reduce your risk of getting measles.", "entity", "mismatch", "measles"),
    ("medquad:NIHSeniorHealth:0000012", "Flu shots can reduce your risk of getting the flu",
     "Flu shots can reduce your risk of getting the flu.", "entity", "match", ""),
    ("medquad:NIHSeniorHealth:0000012", "Flu shots can reduce your risk of getting the flu",
     "The pneumonia vaccine lowers your risk for meningitis.", "entity", "mismatch",
     "meningitis"),
    ("medquad:NIHSeniorHealth:0000012", "Flu shots can reduce your risk of getting the flu",
     "The pneumonia vaccine lowers your risk for pneumococcal pneumonia and its "
     "complications.", "entity", "match", ""),
    ("medquad:MPlusHealthTopics:0000780", "recently had a viral infection",
     "Reye syndrome can affect the blood, liver, and brain of someone who recently had a "
     "bacterial infection.", "entity", "mismatch", "bacterial"),
    ("medquad:MPlusHealthTopics:0000780", "recently had a viral infection",
     "Reye syndrome can affect the blood, liver, and brain of someone who has recently had a "
     "viral infection.", "entity", "match", ""),
    ("medquad:CDC:0000327", "is a small, thin, white roundworm",
     "A pinworm is a small, thin, white tapeworm that sometimes lives in the colon and rectum "
     "of humans.", "entity", "mismatch", "tapeworm"),
    ("medquad:CDC:0000327", "is a small, thin, white roundworm",
     "A pinworm is a small, thin, white roundworm called Enterobius vermicularis.", "entity",
     "match", ""),
    ("medquad:NIDDK:0000005", "Hashimotos disease often leads to reduced thyroid function",
     "Hashimotos disease often leads to reduced thyroid function, or hyperthyroidism.",
     "entity", "mismatch", "hyperthyroidism"),
    ("medquad:NIDDK:0000005", "Hashimotos disease often leads to reduced thyroid function",
     "Hashimotos disease often leads to hypothyroidism, or reduced thyroid function.",
     "entity", "match", ""),
    ("medquad:CancerGov:0000032_3", "People infected with HIV may have more than twice",
     "People infected with HIV may have more than twice the risk of breast cancer.", "entity",
     "mismatch", "breast"),
    ("medquad:CancerGov:0000032_3", "People infected with HIV may have more than twice",
     "People infected with HIV may have more than twice the risk of lung cancer.", "entity",
     "match", ""),
    ("medquad:MPlusHealthTopics:0000722", "PCP once was the major cause of death",
     "PCP once was the major cause of death for people with tuberculosis.", "entity",
     "mismatch", "tuberculosis"),
    ("medquad:MPlusHealthTopics:0000722", "PCP once was the major cause of death",
     "PCP was once the major cause of death for people with HIV/AIDS.", "entity", "match",
     ""),
    ("medquad:MPlusHealthTopics:0000128", "BRCA1 and BRCA2, that greatly increase the risk",
     "The chance of getting prostate cancer rises as a woman gets older.", "entity",
     "mismatch", "prostate"),
    ("medquad:MPlusHealthTopics:0000128", "BRCA1 and BRCA2, that greatly increase the risk",
     "The chance of getting breast cancer rises as a woman gets older.", "entity", "match",
     ""),
    ("medquad:CancerGov:0000037_4", "Colorectal cancer is found more often in men",
     "Lung cancer is found more often in men than in women.", "entity", "mismatch", "lung"),
    ("medquad:CancerGov:0000037_4", "Colorectal cancer is found more often in men",
     "Colorectal cancer is found more often in men than in women.", "entity", "match", ""),
    ("medquad:NIHSeniorHealth:0000028", "Physicians often prescribe high doses of non-steroidal",
     "Physicians often prescribe high doses of NSAIDs or steroids for a sudden attack of "
     "asthma.", "entity", "mismatch", "asthma"),
    ("medquad:NIHSeniorHealth:0000028", "Physicians often prescribe high doses of non-steroidal",
     "Physicians often prescribe high doses of NSAIDs or steroids for a sudden attack of "
     "gout.", "entity", "match", ""),
    ("medquad:CDC:0000327", "Household pets like dogs and cats cannot become infected",
     "Household pets like dogs and cats cannot become infected with human tapeworms.",
     "entity", "mismatch", "tapeworm"),
    ("medquad:CDC:0000327", "Household pets like dogs and cats cannot become infected",
     "Household pets like dogs and cats cannot become infected with human pinworms.",
     "entity", "match", ""),
    ("medquad:NIHSeniorHealth:0000012", "Cigarette smoking is the most common cause of COPD in",
     "Cigarette smoking is the most common cause of asthma in the United States.", "entity",
     "mismatch", "asthma"),
    ("medquad:NIHSeniorHealth:0000012", "Cigarette smoking is the most common cause of COPD in",
     "Cigarette smoking is the most common cause of COPD in the United States.", "entity",
     "match", ""),
]

HELD_OUT: list[tuple[str, str, str, str, str, str]] = [
    # Written after the checks were frozen for SPECS (commit 10cf067) and measured without
    # changing them: an estimate of how the checks do on claims they were not tuned on.
    ("medquad:MPlusHealthTopics:0000287", "These diets rarely lead to permanent weight loss",
     "These diets commonly lead to permanent weight loss.", "frequency", "mismatch",
     "commonly"),
    ("medquad:MPlusHealthTopics:0000287", "These diets rarely lead to permanent weight loss",
     "These diets seldom lead to permanent weight loss.", "frequency", "match", ""),
    ("medquad:MPlusHealthTopics:0000716", "Pituitary tumors are usually curable",
     "Pituitary tumors are rarely curable.", "frequency", "mismatch", "rarely"),
    ("medquad:MPlusHealthTopics:0000716", "Pituitary tumors are usually curable",
     "Pituitary tumors are generally curable.", "frequency", "match", ""),
    ("medquad:MPlusHealthTopics:0000716", "Pituitary tumors are common, but often",
     "Pituitary tumors are rare.", "frequency", "mismatch", "rare"),
    ("medquad:NINDS:0000151", "HAM/TSP is a progressive disease, but it is rarely fatal",
     "HAM/TSP is a progressive disease that is usually fatal.", "frequency", "mismatch",
     "usually"),
    ("medquad:NINDS:0000151", "HAM/TSP is a progressive disease, but it is rarely fatal",
     "HAM/TSP is a progressive disease, but it is seldom fatal.", "frequency", "match", ""),
    ("medquad:NINDS:0000004", "The disorder usually occurs in children between the ages",
     "Landau-Kleffner syndrome rarely occurs in children between the ages of 5 and 7 years.",
     "frequency", "mismatch", "rarely"),
    ("medquad:NINDS:0000004", "The disorder usually occurs in children between the ages",
     "Landau-Kleffner syndrome typically occurs in children between the ages of 5 and 7.",
     "frequency", "match", ""),
    ("medquad:NINDS:0000129", "are commonly affected",
     "In FMD, the carotid arteries are rarely affected.", "frequency", "mismatch", "rarely"),
    ("medquad:NINDS:0000129", "are commonly affected",
     "The carotid arteries, which supply blood to the brain, are often affected.",
     "frequency", "match", ""),
    ("medquad:MPlusHealthTopics:0000503", "It is usually caused by staphylococcal (staph)",
     "It is usually caused by listeria bacteria, but it can also be caused by strep "
     "bacteria.", "entity", "mismatch", "listeria"),
    ("medquad:MPlusHealthTopics:0000503", "It is usually caused by staphylococcal (staph)",
     "It is usually caused by staph bacteria, but it can also be caused by strep bacteria.",
     "entity", "match", ""),
    ("medquad:MPlusHealthTopics:0000324", "Usually the cause is a viral infection",
     "Usually the cause is a fungal infection, but bacteria can also cause it.", "entity",
     "mismatch", "fungal"),
    ("medquad:MPlusHealthTopics:0000324", "Usually the cause is a viral infection",
     "The cause is usually a viral infection, although bacteria can also cause it.",
     "entity", "match", ""),
    ("medquad:MPlusHealthTopics:0000780", "taking aspirin increases the risk of getting it",
     "Studies have shown that taking aspirin decreases the risk of getting Reye syndrome.",
     "direction", "mismatch", "decreases"),
    ("medquad:MPlusHealthTopics:0000780", "taking aspirin increases the risk of getting it",
     "Studies have shown that taking aspirin raises the risk of getting Reye syndrome.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000126", "loosens stool and increases bowel movements",
     "A laxative is a medicine that decreases bowel movements.", "direction", "mismatch",
     "decreases"),
    ("medquad:NIDDK:0000126", "loosens stool and increases bowel movements",
     "A laxative is a medicine that loosens stool and increases bowel movements.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000205", "(Oxytrol) may decrease side effects",
     "A patch delivery system for oxybutynin (Oxytrol) may increase side effects.",
     "direction", "mismatch", "increase"),
    ("medquad:NIDDK:0000205", "(Oxytrol) may decrease side effects",
     "A new patch delivery system for oxybutynin (Oxytrol) may reduce side effects.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000107", "prescribed at low doses, may improve gastric emptying",
     "This antibiotic, prescribed at low doses, may worsen gastric emptying.", "direction",
     "mismatch", "worsen"),
    ("medquad:NIDDK:0000107", "prescribed at low doses, may improve gastric emptying",
     "Prescribed at low doses, this antibiotic may improve gastric emptying.", "direction",
     "match", ""),
    ("medquad:NINDS:0000110", "read at levels significantly lower than expected",
     "People with dyslexia typically read at levels higher than expected.", "direction",
     "mismatch", "higher"),
    ("medquad:NINDS:0000110", "read at levels significantly lower than expected",
     "These individuals typically read at levels significantly lower than expected.",
     "direction", "match", ""),
    ("medquad:NIDDK:0000218", "may increase urine output and contribute",
     "Pills to treat swelling or high blood pressure may decrease urine output.", "direction",
     "mismatch", "decrease"),
    ("medquad:NIDDK:0000218", "may increase urine output and contribute",
     "Pills to treat edema or high blood pressure may increase urine output.", "direction",
     "match", ""),
    ("medquad:MPlusHealthTopics:0000019", "Inhaling them can increase the chance",
     "Inhaling them can reduce the chance you'll have health problems.", "direction",
     "mismatch", "reduce"),
    ("medquad:NINDS:0000143", "When headaches occur three or more times a month",
     "When headaches occur once a year, preventive treatment is usually recommended.",
     "number", "mismatch", "once a year"),
    ("medquad:NINDS:0000143", "When headaches occur three or more times a month",
     "Preventive treatment is usually recommended when headaches occur three or more times a "
     "month.", "number", "match", ""),
    ("medquad:NIDDK:0000205", "These drugs have the advantage of once-a-day administration",
     "These drugs have the advantage of twice-a-day administration.", "number", "mismatch",
     "twice"),
    ("medquad:NIDDK:0000032", "taking a low dose of aspirin every day can help reduce",
     "Taking a low dose of aspirin once a week can help reduce the risk of heart disease and "
     "stroke.", "number", "mismatch", "once a week"),
    ("medquad:NIDDK:0000032", "taking a low dose of aspirin every day can help reduce",
     "Taking a low dose of aspirin daily can help reduce the risk of heart disease and "
     "stroke.", "number", "match", ""),
    ("medquad:NIDDK:0000176", "About once a month, your dialysis care team",
     "About once a week, your dialysis care team will test your blood.", "number",
     "mismatch", "once a week"),
    ("medquad:NIDDK:0000176", "About once a month, your dialysis care team",
     "About once a month, your dialysis care team tests your blood to see whether your "
     "treatments are removing enough wastes.", "number", "match", ""),
    ("medquad:CancerGov:0000024_8", "the treatments are given more than once a day",
     "In hyperfractionated radiation therapy, the treatments are given once a week.",
     "number", "mismatch", "once a week"),
    ("medquad:CancerGov:0000024_8", "the treatments are given more than once a day",
     "In hyperfractionated radiation therapy, the total dose of radiation is divided into "
     "small doses given more than once a day.", "number", "match", ""),
    ("medquad:NINDS:0000254", "These episodes usually last 10 seconds or more",
     "These episodes usually last 10 minutes or more and occur repeatedly throughout the "
     "night.", "number", "mismatch", "minutes"),
    ("medquad:NINDS:0000254", "These episodes usually last 10 seconds or more",
     "These episodes usually last ten seconds or more and happen repeatedly during the "
     "night.", "number", "match", ""),
    ("medquad:NIDDK:0000119", "Crohns disease usually causes irritation in the lower small",
     "Celiac disease usually causes irritation in the lower small intestine.", "entity",
     "mismatch", "celiac"),
    ("medquad:NIDDK:0000119", "Crohns disease usually causes irritation in the lower small",
     "Crohns disease usually causes irritation in the ileum or the colon.", "entity",
     "match", ""),
    ("medquad:NINDS:0000056", "Migraine headaches may be treated by different drugs",
     "Epilepsy may be treated by different drugs and a daily aspirin may reduce stroke risk.",
     "entity", "mismatch", "epilepsy"),
    ("medquad:NINDS:0000056", "Migraine headaches may be treated by different drugs",
     "Migraine headaches may be treated with different drugs.", "entity", "match", ""),
    ("medquad:CancerGov:0000024_9", "will decrease the risk of oropharyngeal cancer from HPV",
     "It is not yet known whether an HPV vaccination at any age will decrease the risk of "
     "laryngeal cancer from HPV infection.", "entity", "mismatch", "laryngeal"),
    ("medquad:CancerGov:0000024_9", "will decrease the risk of oropharyngeal cancer from HPV",
     "It is not yet known whether an HPV vaccination at any age will decrease the risk of "
     "oropharyngeal cancer from HPV infection.", "entity", "match", ""),
    ("medquad:MPlusHealthTopics:0000722", "The most common problem of infection is pneumocystis",
     "The most common problem of infection is tuberculosis.", "entity", "mismatch",
     "tuberculosis"),
    ("medquad:MPlusHealthTopics:0000722", "The most common problem of infection is pneumocystis",
     "The most common problem of infection is pneumocystis pneumonia.", "entity", "match",
     ""),
]

HELD_OUT_2: list[tuple[str, str, str, str, str, str]] = [
    # Written after the fixes made for HELD_OUT's misses (commit fa621f3), from sentences
    # not used above, and measured without changing the checks.
    ("medquad:NIDDK:0000070", "a person needs daily insulin treatment to survive",
     "At this point, a person needs weekly insulin treatment to survive.", "number",
     "mismatch", "weekly"),
    ("medquad:NIDDK:0000070", "a person needs daily insulin treatment to survive",
     "At this point, a person needs insulin treatment every day to survive.", "number",
     "match", ""),
    ("medquad:NIDDK:0000034", "need to inspect their feet daily for any injuries",
     "People with neuropathy need to inspect their feet once a month for injuries.",
     "number", "mismatch", "month"),
    ("medquad:NIDDK:0000034", "need to inspect their feet daily for any injuries",
     "People with neuropathy should inspect their feet every day for any injuries.",
     "number", "match", ""),
    ("medquad:CancerGov:0000037_3", "aspirin use (100 mg or less) daily or every other day",
     "The possible harms of aspirin use (100 mg or less) once a month include an increased "
     "risk of stroke.", "number", "mismatch", "month"),
    ("medquad:CancerGov:0000037_3", "aspirin use (100 mg or less) daily or every other day",
     "The possible harms of aspirin use of 100 mg or less daily or every other day include "
     "an increased risk of stroke and bleeding.", "number", "match", ""),
    ("medquad:NIDDK:0000214", "Some women have three or more UTIs a year",
     "Some women have two UTIs a year.", "number", "mismatch", "two"),
    ("medquad:NIDDK:0000214", "Some women have three or more UTIs a year",
     "Some women have three or more UTIs each year.", "number", "match", ""),
    ("medquad:NIDDK:0000214", "which usually takes 1 to 3 days",
     "Once the bacteria have multiplied, which usually takes two weeks, they can be "
     "identified.", "number", "mismatch", "weeks"),
    ("medquad:NIDDK:0000214", "which usually takes 1 to 3 days",
     "Once the bacteria have multiplied, which usually takes one to three days, they can be "
     "identified.", "number", "match", ""),
    ("medquad:NIDDK:0000194", "- Hepatitis A usually gets better in a few weeks",
     "Hepatitis A rarely gets better without treatment.", "frequency", "mismatch", "rarely"),
    ("medquad:NIDDK:0000194", "- Hepatitis A usually gets better in a few weeks",
     "Hepatitis A usually improves in a few weeks without treatment.", "frequency", "match",
     ""),
    ("medquad:GHR:0000876", "life-threatening breathing problems are common",
     "Recurrent respiratory infections and life-threatening breathing problems are rare.",
     "frequency", "mismatch", "rare"),
    ("medquad:GHR:0000876", "life-threatening breathing problems are common",
     "Recurrent respiratory infections and breathing problems are common.", "frequency",
     "match", ""),
    ("medquad:NIDDK:0000016", "a type of anemia that commonly occurs with chronic, or long",
     "Anemia of inflammation and chronic disease seldom occurs with chronic illnesses or "
     "infections.", "frequency", "mismatch", "seldom"),
    ("medquad:NIDDK:0000016", "a type of anemia that commonly occurs with chronic, or long",
     "Anemia of inflammation and chronic disease commonly occurs with long-term illnesses or "
     "infections.", "frequency", "match", ""),
    ("medquad:NIDDK:0000126", "A stool test is commonly used to rule out",
     "A stool test is rarely used to rule out other causes of GI diseases.", "frequency",
     "mismatch", "rarely"),
    ("medquad:NIDDK:0000126", "A stool test is commonly used to rule out",
     "A stool test is often used to rule out other causes of GI diseases, such as "
     "infections.", "frequency", "match", ""),
    ("medquad:GHR:0000002", "Rarely, affected individuals who have breathing problems",
     "Affected individuals who have breathing problems in infancy commonly experience "
     "recurrent lung infections later in life.", "frequency", "mismatch", "commonly"),
    ("medquad:GHR:0000002", "Rarely, affected individuals who have breathing problems",
     "Affected individuals with breathing problems in infancy rarely experience recurrent "
     "lung infections or asthma later in life.", "frequency", "match", ""),
    ("medquad:CancerGov:0000023_1", "Langerhans cell histiocytosis (LCH) is a rare cancer",
     "Langerhans cell histiocytosis is a common cancer that begins in LCH cells.",
     "frequency", "mismatch", "common"),
    ("medquad:CancerGov:0000023_1", "Langerhans cell histiocytosis (LCH) is a rare cancer",
     "Langerhans cell histiocytosis (LCH) is a rare cancer that begins in LCH cells.",
     "frequency", "match", ""),
    ("medquad:NIDDK:0000214", "Using a diaphragm may slow urinary flow",
     "Using a diaphragm may speed up urinary flow.", "direction", "mismatch", "speed"),
    ("medquad:NIDDK:0000214", "Using a diaphragm may slow urinary flow",
     "Using a diaphragm may slow urinary flow and let bacteria multiply.", "direction",
     "match", ""),
    ("medquad:CancerGov:0000024_9", "especially HPV type 16, increases the risk",
     "Infection with HPV type 16 decreases the risk of oropharyngeal cancer.", "direction",
     "mismatch", "decreases"),
    ("medquad:CancerGov:0000024_9", "especially HPV type 16, increases the risk",
     "Infection with certain types of HPV, especially HPV type 16, raises the risk of "
     "oropharyngeal cancer.", "direction", "match", ""),
    ("medquad:NIDDK:0000214", "will continue having recurrent UTIs increases",
     "With each UTI, the risk that a woman will continue having recurrent UTIs decreases.",
     "direction", "mismatch", "decreases"),
    ("medquad:NIDDK:0000214", "will continue having recurrent UTIs increases",
     "With every UTI, the risk that a woman keeps having recurrent UTIs increases.",
     "direction", "match", ""),
    ("medquad:NINDS:0000129", "to thin the blood and reduce the chances that a clot",
     "Patients with minimal narrowing may take a daily aspirin to thin the blood and increase "
     "the chances that a clot might form.", "direction", "mismatch", "increase"),
    ("medquad:NINDS:0000129", "to thin the blood and reduce the chances that a clot",
     "Patients with minimal narrowing may take a daily aspirin to thin the blood and reduce "
     "the chances that a clot might form.", "direction", "match", ""),
    ("medquad:MPlusHealthTopics:0000301", "They reduce aches and pains, fight infections",
     "They increase aches and pains.", "direction", "mismatch", "increase"),
    ("medquad:MPlusHealthTopics:0000301", "They reduce aches and pains, fight infections",
     "They reduce aches and pains and fight infections.", "direction", "match", ""),
    ("medquad:NIDDK:0000188", "- Weight loss and weakness may begin once the disease",
     "Weight gain and weakness may begin once the disease is advanced or cirrhosis is "
     "present.", "direction", "mismatch", "gain"),
    ("medquad:NIDDK:0000188", "- Weight loss and weakness may begin once the disease",
     "Weight loss and weakness may begin once the disease is advanced.", "direction",
     "match", ""),
    ("medquad:GARD:0002385", "FHCS is usually caused by an infection of chlamydia",
     "FHCS is usually caused by an infection of syphilis that leads to PID.", "entity",
     "mismatch", "syphilis"),
    ("medquad:GARD:0002385", "FHCS is usually caused by an infection of chlamydia",
     "FHCS is usually caused by a chlamydia or gonorrhea infection that leads to PID.",
     "entity", "match", ""),
    ("medquad:NIDDK:0000214", "Bacteria are the most common cause of UTIs",
     "Parasites are the most common cause of UTIs.", "entity", "mismatch", "parasites"),
    ("medquad:NIDDK:0000214", "Bacteria are the most common cause of UTIs",
     "The most common cause of UTIs is bacteria.", "entity", "match", ""),
    ("medquad:NIDDK:0000194", "- Hepatitis A usually gets better in a few weeks",
     "Hepatitis C usually gets better in a few weeks without treatment.", "entity",
     "mismatch", "hepatitis c"),
    ("medquad:NIDDK:0000194", "- Hepatitis A usually gets better in a few weeks",
     "Without treatment, hepatitis A usually gets better in a few weeks.", "entity", "match",
     ""),
    ("medquad:MPlusHealthTopics:0000511", "Sometimes, reactive arthritis is set off",
     "Sometimes, gout is set off by an infection in the bladder.", "entity", "mismatch",
     "gout"),
    ("medquad:MPlusHealthTopics:0000511", "Sometimes, reactive arthritis is set off",
     "Sometimes reactive arthritis is set off by an infection in the bladder or the urethra.",
     "entity", "match", ""),
    ("medquad:CancerGov:0000032_3", "twice as likely to have lung cancer",
     "People with a relative who has had breast cancer may be twice as likely to have breast "
     "cancer.", "entity", "mismatch", "breast"),
    ("medquad:CancerGov:0000032_3", "twice as likely to have lung cancer",
     "People with a relative who had lung cancer may be twice as likely to get lung cancer.",
     "entity", "match", ""),
    ("medquad:GARD:0000660", "Though rare, human infections can be severe if the parasite",
     "Though rare, human infections can be severe if the virus invades the eye.", "entity",
     "mismatch", "virus"),
    ("medquad:GARD:0000660", "Though rare, human infections can be severe if the parasite",
     "Though rare, human infections can be severe if the parasite invades the eye or the "
     "brain.", "entity", "match", ""),
]


def _fold(text: str) -> str:
    return " ".join(text.split())


def passage(text: str, anchor: str) -> str:
    """The sentence of ``text`` holding ``anchor`` with the sentences before and after it:
    the text from the one before to the one after, its line breaks kept, the whitespace of
    each line folded and blank lines dropped."""
    spans = [(a, b) for a, b in sentence_char_spans(text) if text[a:b].strip()]
    want = _fold(anchor)
    at = next((k for k, (a, b) in enumerate(spans) if want in _fold(text[a:b])), None)
    if at is None:
        raise SystemExit(f"anchor not found: {anchor!r}")
    start, end = spans[max(0, at - 1)][0], spans[min(len(spans) - 1, at + 1)][1]
    lines = (_fold(line) for line in text[start:end].splitlines())
    return "\n".join(line for line in lines if line)


def build() -> list[dict[str, str]]:
    docs = {}
    for line in SAMPLE.read_text("utf-8").splitlines():
        row = json.loads(line)
        docs[row["doc_id"]] = row["text"]
    rows = []
    specs = [*((spec, "dev") for spec in SPECS), *((spec, "held-out") for spec in HELD_OUT),
             *((spec, "held-out-2") for spec in HELD_OUT_2)]
    for n, ((doc_id, anchor, claim, kind, label, planted), split) in enumerate(specs, 1):
        text = passage(docs[doc_id], anchor)
        if label == "mismatch" and re.search(rf"\b{re.escape(planted)}\b", text, re.I):
            raise SystemExit(f"planted word {planted!r} is in the passage of: {claim!r}")
        rows.append({"id": f"ew{n:03d}", "split": split, "doc_id": doc_id, "kind": kind,
                     "label": label, "claim": claim, "passage": text, "planted": planted})
    return rows


def main() -> int:
    rows = build()
    OUT.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["split"], r["kind"], r["label"])
        counts[key] = counts.get(key, 0) + 1
    print(f"wrote {len(rows)} pairs to {OUT}: {dict(sorted(counts.items()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
