"""Everyday topics and their lexicons.

Each topic fills the generator's topic slots:
  noun  - the topic's KEYWORDS (single words, used as "the {noun}"); the judge's topicality
          check looks for these, so they are unique to the topic (tests enforce it)
  thing - related noun phrases without article ("the {thing}")
  place - noun phrases with article, used after "in" / "to" ("in {place}")
  act   - base-form verb phrases ("i {act}", "to {act}", "people {act}")
  adj   - plain adjectives (never style markers)
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

TOPIC_SLOTS: tuple[str, ...] = ("noun", "thing", "place", "act", "adj")


def _t(noun: str, thing: str, place: str, act: str, adj: str) -> Mapping[str, tuple[str, ...]]:
    # "|" separates phrases; kept compact so the whole table reads at a glance.
    def parts(s: str) -> tuple[str, ...]:
        return tuple(p.strip() for p in s.split("|"))

    return MappingProxyType(
        {"noun": parts(noun), "thing": parts(thing), "place": parts(place), "act": parts(act), "adj": parts(adj)}
    )


TOPIC_LEXICONS: Mapping[str, Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "coffee": _t(
            "coffee|espresso|latte",
            "warm mug|morning cup|milk foam|bean grinder",
            "the corner cafe|the kitchen|the office",
            "brew a fresh pot|sip it slowly|grind the beans|add a little milk",
            "warm|bitter|strong|smooth",
        ),
        "tea": _t(
            "tea|teapot|chamomile",
            "sugar bowl|hot kettle|china cup|honey jar",
            "the kitchen|the garden|the tea room",
            "steep the leaves|boil the kettle|pour a cup|add some honey",
            "calm|hot|fragrant|mild",
        ),
        "rainy days": _t(
            "rain|drizzle|puddle",
            "grey sky|wet coat|window glass|rain jacket",
            "the street|the porch|the city",
            "watch the drops fall|stay inside|jump in puddles|listen to the drops",
            "wet|grey|gentle|damp",
        ),
        "the bus ride": _t(
            "bus|commute|timetable",
            "window seat|bus pass|crowded aisle|next stop",
            "the city|the suburbs|the station",
            "find a seat|look out the window|read the news|wait at the stop",
            "slow|crowded|noisy|long",
        ),
        "houseplants": _t(
            "houseplant|fern|ivy",
            "new leaf|clay pot|watering can|fresh soil",
            "the living room|the sunny corner|the bedroom",
            "water them gently|repot the fern|turn them to the light|trim the old leaves",
            "green|leafy|lush|thirsty",
        ),
        "a lost umbrella": _t(
            "umbrella|parasol",
            "black handle|folded canopy|lost property office|wet sleeve",
            "the train|the shop|the station",
            "retrace the steps|check the lost property desk|buy a new one|ask the driver",
            "lost|black|folded|forgotten",
        ),
        "breakfast": _t(
            "breakfast|pancake|toast",
            "maple syrup|fried egg|orange juice|butter knife",
            "the kitchen|the diner|the dining room",
            "flip the pancakes|butter the toast|set the table|fry some eggs",
            "golden|crisp|hearty|sweet",
        ),
        "the morning walk": _t(
            "walk|stroll",
            "quiet path|fresh air|wet grass|early light",
            "the park|the neighborhood|the woods",
            "take the long way|breathe the cool air|wave to the neighbors|stretch a little",
            "quiet|cool|early|brisk",
        ),
        "cats": _t(
            "cat|kitten",
            "soft tail|string toy|scratching post|food bowl",
            "the sofa|the sunroom|the hallway",
            "brush its fur|play with string|feed them supper|watch it doze",
            "soft|lazy|curious|sleepy",
        ),
        "dogs": _t(
            "dog|puppy",
            "old leash|chew toy|dog bed|tennis ball",
            "the park|the backyard|the field",
            "throw the ball|go for a run|teach it a trick|give it a bath",
            "loyal|playful|muddy|happy",
        ),
        "baking bread": _t(
            "bread|dough|loaf",
            "warm oven|flour sack|crusty edge|rising bowl",
            "the kitchen|the bakery|the village",
            "knead the dough|wait for it to rise|slice it thick|dust the counter",
            "crusty|warm|golden|soft",
        ),
        "the library": _t(
            "library|bookshelf|librarian",
            "quiet desk|reading lamp|old novel|library card",
            "the reading room|the city|the basement",
            "borrow a novel|find a quiet desk|return the novels|read for hours",
            "quiet|dusty|calm|old",
        ),
        "gardening": _t(
            "seedling|trowel|tomato",
            "muddy apron|seed packet|raised bed|garden hose",
            "the backyard|the allotment|the greenhouse",
            "pull the weeds|plant the seeds|water the rows|dig a new bed",
            "muddy|sunny|fresh|green",
        ),
        "the weekend market": _t(
            "market|stall|vendor",
            "fresh produce|paper bag|handmade soap|flower bunch",
            "the town square|the high street|the car park",
            "haggle over prices|fill a basket|taste a sample|chat with the sellers",
            "busy|colorful|lively|cheap",
        ),
        "cooking dinner": _t(
            "dinner|stew|pasta",
            "wooden spoon|big pot|chopped onion|spice rack",
            "the kitchen|the dining room|the cottage",
            "chop the vegetables|stir the sauce|set the table|taste the sauce",
            "savory|hot|hearty|spicy",
        ),
        "the first snow": _t(
            "snow|snowflake|snowman",
            "white roof|warm hat|frozen pond|wool scarf",
            "the yard|the hills|the street",
            "build a snowman|catch the flakes|shovel the path|sled down the hill",
            "white|cold|soft|quiet",
        ),
        "a birthday party": _t(
            "birthday|cake|party",
            "paper crown|red balloon|wrapped gift|party game",
            "the living room|the backyard|the community hall",
            "blow out the candles|wrap the gifts|sing loudly|cut the cake",
            "festive|sweet|loud|joyful",
        ),
        "moving house": _t(
            "move|box|relocation",
            "packing tape|empty shelf|new key|rental van",
            "the new flat|the old street|the hallway",
            "pack the boxes|label everything|carry the sofa|unpack the plates",
            "empty|heavy|new|tiring",
        ),
        "a summer picnic": _t(
            "picnic|sandwich|hamper",
            "checked blanket|lemonade jug|fruit salad|paper plate",
            "the park|the meadow|the riverbank",
            "spread the blanket|pack the hamper|share the food|chase the ants",
            "sunny|lazy|warm|pleasant",
        ),
        "the dentist": _t(
            "dentist|toothbrush|checkup",
            "bright lamp|waiting room chair|dental floss|mint rinse",
            "the clinic|the waiting room|the city",
            "brush twice a day|floss every night|sit very still|book the next visit",
            "clean|nervous|bright|minty",
        ),
        "learning guitar": _t(
            "guitar|chord|fretboard",
            "sore fingertip|spare string|worn pick|song sheet",
            "the bedroom|the music school|the porch",
            "tune the strings|practice scales|strum slowly|learn a new song",
            "wooden|tricky|gentle|loud",
        ),
        "homework": _t(
            "homework|worksheet|essay",
            "sharp pencil|messy notebook|long assignment|math problem",
            "the classroom|the common room|the bedroom",
            "finish the essay|check the answers|take short breaks|ask for help",
            "hard|long|boring|tricky",
        ),
        "the laundry": _t(
            "laundry|sock|detergent",
            "clean towel|warm sheet|lint trap|drying rack",
            "the basement|the laundromat|the balcony",
            "fold the towels|sort the colors|hang the sheets|match the pairs",
            "clean|fresh|warm|soft",
        ),
        "the beach": _t(
            "beach|seashell|tide",
            "warm sand|salty breeze|striped towel|sand castle",
            "the coast|the boardwalk|the bay",
            "build a sand castle|swim in the waves|collect shells|wander along the water",
            "sunny|salty|sandy|bright",
        ),
        "a new phone": _t(
            "phone|smartphone|charger",
            "cracked screen|rubber case|home screen|battery life",
            "the store|the couch|the train",
            "set it up|charge the battery|take some photos|install new apps",
            "shiny|fast|new|sleek",
        ),
        "the old bicycle": _t(
            "bicycle|bike|saddle",
            "rusty chain|flat tire|loud bell|wicker basket",
            "the shed|the cycle lane|the hills",
            "pump the tires|oil the chain|ride to town|fix the brakes",
            "rusty|old|squeaky|trusty",
        ),
        "a thunderstorm": _t(
            "thunder|lightning|thunderstorm",
            "flickering light|heavy sky|loud crash|old flashlight",
            "the house|the hills|the city",
            "count the seconds|unplug the lamps|hide under a blanket|watch the sky",
            "loud|wild|sudden|electric",
        ),
        "knitting": _t(
            "knitting|yarn|needle",
            "wool sweater|unfinished scarf|dropped stitch|pattern book",
            "the armchair|the living room|the craft club",
            "cast on a row|count the stitches|pick a color|finish a sweater",
            "woolly|warm|soft|slow",
        ),
        "a museum visit": _t(
            "museum|gallery|exhibit",
            "old painting|marble statue|audio guide|ticket stub",
            "the city|the east wing|the gift shop",
            "read the labels|stand very still|buy a print|follow the guide",
            "quiet|grand|old|crowded",
        ),
        "doing the dishes": _t(
            "dish|sponge|dishwasher",
            "soapy water|dish rack|clean plate|dish towel",
            "the kitchen|the sink|the cottage",
            "scrub the pans|rinse the plates|dry the cups|load the rack",
            "soapy|clean|greasy|shiny",
        ),
        "a long nap": _t(
            "nap|snooze|pillow",
            "soft blanket|quiet afternoon|drawn curtain|warm sofa",
            "the couch|the bedroom|the hammock",
            "close the curtains|set an alarm|curl up|sleep past noon",
            "sleepy|drowsy|quiet|lazy",
        ),
        "the train station": _t(
            "platform|railway|departure",
            "departure board|ticket machine|station clock|rolling suitcase",
            "the main hall|the city|the waiting area",
            "check the board|buy a ticket|catch the early train|wait for the train",
            "busy|late|crowded|echoing",
        ),
        "a sunny afternoon": _t(
            "sunshine|sunbeam|sunlight",
            "blue sky|warm bench|cold drink|long shadow",
            "the park|the terrace|the garden",
            "read outside|lie in the grass|soak it up|sit by the window",
            "bright|golden|warm|lazy",
        ),
        "the grocery store": _t(
            "supermarket|checkout|trolley",
            "shopping list|full cart|fresh fruit|long queue",
            "the city|the frozen aisle|the parking lot",
            "pick ripe fruit|compare prices|pack the bags|wait in line",
            "busy|bright|crowded|cheap",
        ),
        "a letter from a friend": _t(
            "letter|envelope|mailbox",
            "neat handwriting|old stamp|folded page|pressed flower",
            "the hallway|the porch|the post office",
            "read it twice|write a reply|open it carefully|keep it in a drawer",
            "kind|long|handwritten|warm",
        ),
        "the night sky": _t(
            "star|moon|constellation",
            "silver light|shooting star|cold air|old telescope",
            "the hills|the rooftop|the backyard",
            "count the stars|find the big dipper|make a wish|lie on the grass",
            "clear|silver|cold|bright",
        ),
    }
)

TOPICS: tuple[str, ...] = tuple(TOPIC_LEXICONS)


def topic_keywords(topic: str) -> frozenset[str]:
    """The words whose presence makes a text 'about' the topic (its nouns)."""
    return frozenset(TOPIC_LEXICONS[topic]["noun"])
