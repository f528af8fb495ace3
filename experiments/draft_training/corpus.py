"""The prompt corpora the target writes its teacher data from (question openers, news topics, German sentences and
templates) and the chat prompt format."""

from __future__ import annotations

import random

SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
OPENERS = [
    "What", "How", "Why", "Explain", "Write", "Describe", "Give me", "List", "Can you", "Summarize", "Tell me",
    "Compare", "Suggest", "Which", "When", "Who", "Is it", "Help me", "Create", "Classify", "Brainstorm",
    "What are", "How do I", "Name", "Please", "I need", "Rewrite", "Extract", "Define", "Plan",
]
NEWS_TOPICS = [
    "a city council approving a new bike lane network", "a heatwave breaking temperature records in Europe",
    "a local football club winning promotion", "a new species of frog found in a rainforest",
    "a tech company laying off staff", "a train strike disrupting commuters", "a museum returning stolen artefacts",
    "a breakthrough in battery research", "flooding in a coastal town", "a school introducing a four-day week",
    "a central bank raising interest rates", "a rescue of hikers stranded on a mountain", "a new hospital opening",
    "a drought hitting farmers", "an election result in a small country", "a spacecraft landing on the Moon",
    "a celebrity chef opening a restaurant", "a cyber attack on a hospital", "a record sale at an art auction",
    "a wildfire forcing evacuations", "a charity marathon raising money", "a factory closing down",
    "a new law on plastic bags", "a zoo welcoming a baby elephant", "a bridge closed for repairs",
    "rising house prices in a capital city", "a scientist winning a major prize", "a power cut across a region",
    "a festival cancelled because of storms", "a university cutting tuition fees", "a data leak at a bank",
    "a village fighting to keep its post office", "a new vaccine approved by regulators", "a ferry running aground",
    "a court ruling on workers' rights", "an airline cancelling flights", "a teenager winning a chess title",
    "a volcano erupting near a tourist area", "a supermarket chain raising wages", "a police operation against fraud",
    "a historic theatre reopening", "an oil spill near a beach", "a new metro line opening",
    "a study linking sleep and memory", "a government budget announcement", "a wind farm approved offshore",
    "a dog that travelled hundreds of miles home", "a hospital waiting-list crisis", "a mayor resigning",
    "a shipwreck discovered by divers", "a ban on smartphones in schools", "food prices rising after a bad harvest",
]
GERMAN_SOURCES = [
    "Die Regierung hat heute neue Regeln für den Bahnverkehr vorgestellt.",
    "Im Sommer fahren viele Familien an die Ostsee.",
    "Der Preis für Strom ist im letzten Jahr stark gestiegen.",
    "Mein Bruder arbeitet seit zehn Jahren als Lehrer in München.",
    "Die Ausstellung zeigt Bilder aus dem neunzehnten Jahrhundert.",
    "Nach dem Sturm waren viele Straßen gesperrt.",
    "Wir treffen uns morgen um acht Uhr vor dem Bahnhof.",
    "Das neue Gesetz soll kleine Unternehmen entlasten.",
    "Die Mannschaft hat das Spiel in der letzten Minute gewonnen.",
    "Viele Menschen arbeiten inzwischen von zu Hause aus.",
    "Der Bürgermeister versprach, mehr Wohnungen zu bauen.",
    "Die Forscher haben eine neue Methode zur Wasserreinigung entwickelt.",
    "Am Wochenende soll es in ganz Deutschland regnen.",
    "Die Bibliothek bleibt wegen Renovierung bis März geschlossen.",
    "Der Zug hatte wegen einer Störung eine Stunde Verspätung.",
    "Sie hat ihr Studium mit Auszeichnung abgeschlossen.",
    "Die Firma will im nächsten Jahr zweihundert neue Mitarbeiter einstellen.",
    "In der Stadt gibt es immer weniger kleine Läden.",
    "Der Arzt empfiehlt, mehr Wasser zu trinken.",
    "Das Konzert war schon nach wenigen Minuten ausverkauft.",
    "Die Polizei sucht nach Zeugen des Unfalls.",
    "Unsere Nachbarn haben einen kleinen Hund aus dem Tierheim geholt.",
    "Die Schule bekommt endlich schnelles Internet.",
    "Der Fluss ist nach dem starken Regen über die Ufer getreten.",
    "Die Verhandlungen zwischen den Parteien dauerten bis spät in die Nacht.",
    "Ich habe das Buch in zwei Tagen gelesen.",
    "Das Museum bietet jeden Sonntag kostenlose Führungen an.",
    "Die Zahl der Touristen ist wieder gestiegen.",
    "Der Bäcker an der Ecke öffnet schon um sechs Uhr morgens.",
    "Die Ministerin kündigte mehr Geld für Schulen an.",
]

GERMAN_SUBJECTS = [
    "Die Stadtverwaltung", "Der Bürgermeister", "Die Polizei", "Die Bundesregierung", "Das Unternehmen",
    "Der Verein", "Die Schule", "Die Forscherin", "Der Vorstand", "Die Gewerkschaft", "Das Krankenhaus",
    "Die Bahn", "Der Minister", "Die Feuerwehr", "Das Museum", "Die Universität", "Der Trainer", "Die Bank",
]
GERMAN_VERBS = [
    "hat am Montag angekündigt, dass", "teilte am Dienstag mit, dass", "erklärte auf einer Pressekonferenz, dass",
    "räumte ein, dass", "bestätigte am Abend, dass", "warnte davor, dass", "hofft, dass",
]
GERMAN_CLAUSES = [
    "die Brücke für sechs Wochen gesperrt wird", "die Preise im nächsten Jahr weiter steigen werden",
    "mehr Geld in den Ausbau des Schienennetzes fließen soll", "das Konzert wegen des Regens ausfällt",
    "niemand bei dem Unfall schwer verletzt wurde", "die Nachfrage deutlich unterschätzt wurde",
    "zweihundert neue Stellen geschaffen werden", "die Bauarbeiten bis zum Herbst dauern werden",
    "die Zahl der Besucher stark gestiegen ist", "die Verhandlungen fortgesetzt werden",
    "ein neues Gesetz kleine Betriebe entlasten soll", "die Ausstellung bis März verlängert wird",
    "der Flughafen wegen eines Streiks geschlossen bleibt", "die Mieten in der Innenstadt stark gestiegen sind",
    "das Wasser in der Region knapp wird", "die Züge in der Nacht wieder fahren sollen",
]
GERMAN_TAILS = [
    "", " Bereits gekaufte Karten behalten ihre Gültigkeit.", " Die Opposition kritisierte die Entscheidung scharf.",
    " Eine Entscheidung soll noch in diesem Monat fallen.", " Anwohner hatten sich seit Jahren darüber beschwert.",
    " Weitere Einzelheiten wurden zunächst nicht bekannt.",
]


def german_text(rng: random.Random) -> str:
    """A WMT-style German news sentence from templates (varied enough for translation prompts)."""
    return f"{rng.choice(GERMAN_SUBJECTS)} {rng.choice(GERMAN_VERBS)} {rng.choice(GERMAN_CLAUSES)}." \
           f"{rng.choice(GERMAN_TAILS)}"


def chat_prompt(tok, text: str) -> list[int]:
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"]
