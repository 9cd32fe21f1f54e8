"""Each world topic's curated semantic field, as written by hand: its core words, then related ones
(judges/open_world/topics.py weighs them, adds the world's own topic words and reads the rest by meaning)."""

FIELD_WORDS: dict[str, tuple[str, str]] = {  # topic -> (core words, related words)
    "coffee": (
        "coffee espresso latte cappuccino barista caffeine americano mocha macchiato",
        "mug cup brew bean grinder grind roast cafe kettle filter milk foam froth sip decaf aroma bitter",
    ),
    "tea": (
        "tea teapot chamomile teabag",
        "kettle steep leaf leaves cup mug brew honey sugar milk lemon herbal infusion saucer china sip steam pot",
    ),
    "rainy days": (
        "rain rainy drizzle puddle downpour raindrop",
        "umbrella wet grey gray cloud shower damp soaked raincoat boot gutter drop window storm splash gloomy",
    ),
    "the bus ride": (
        "bus commute commuter timetable",
        "ride seat passenger stop driver route fare ticket aisle window journey travel crowded transit",
    ),
    "houseplants": (
        "houseplant fern ivy pothos succulent cactus",
        "plant leaf leaves pot soil water repot windowsill sunlight green leafy grow root bloom foliage",
    ),
    "a lost umbrella": (
        "umbrella parasol",
        "lost property handle canopy rain wet forgot forgotten found left missing soaked",
    ),
    "breakfast": (
        "breakfast pancake toast cereal porridge brunch omelette",
        "egg bacon syrup juice orange butter jam coffee morning bread milk yogurt fry kitchen marmalade",
    ),
    "the morning walk": (
        "walk stroll",
        "morning dawn path lane park air dew bird early stride neighbor neighbour sunrise hedge wander",
    ),
    "cats": (
        "cat kitten kitty feline",
        "purr whisker paw fur tail meow mice mouse litter pounce nap sofa scratch claw pet",
    ),
    "dogs": ("dog puppy hound pup", "bark leash tail walk fetch ball paw fur wag kennel collar treat breed vet pet"),
    "baking bread": (
        "bread dough loaf loaves bake baking",
        "oven flour yeast knead rise crust crusty sourdough baker bakery butter slice golden",
    ),
    "the library": (
        "library librarian bookshelf",
        "book shelf shelves novel borrow reading read quiet card desk aisle archive catalogue page return",
    ),
    "gardening": (
        "garden gardening gardener seedling trowel tomato",
        "seed soil weed plant dig spade bloom rose bean compost hose water bed allotment greenhouse vegetable",
    ),
    "the weekend market": (
        "market stall vendor",
        "produce stand haggle price basket fruit vegetable cheese honey craft square shopper seller farmer",
    ),
    "cooking dinner": (
        "dinner cooking cook stew pasta",
        "recipe pan pot stove oven sauce onion garlic chop stir vegetable kitchen meal supper spice simmer",
    ),
    "the first snow": (
        "snow snowflake snowman snowfall",
        "winter cold white flake frost frozen sled mitten scarf slush ice icy shovel",
    ),
    "a birthday party": (
        "birthday party cake",
        "candle balloon gift present celebrate celebration guest wish game cupcake frosting sing crown",
    ),
    "moving house": (
        "move moving relocation relocate",
        "box pack unpack van flat apartment house home neighbour key rent landlord furniture removal",
    ),
    "a summer picnic": (
        "picnic sandwich hamper",
        "blanket basket meadow park lemonade strawberry summer grass ant sun sunny outdoor lunch riverbank",
    ),
    "the dentist": (
        "dentist dental toothbrush checkup teeth tooth",
        "floss clinic cavity drill hygienist gum appointment chair mouth lamp brace filling",
    ),
    "learning guitar": (
        "guitar chord fretboard",
        "string strum pick practice practise song finger fingertip lesson tune music scale amplifier",
    ),
    "homework": (
        "homework worksheet essay assignment",
        "school teacher study pencil notebook math maths problem question answer deadline class student",
    ),
    "the laundry": (
        "laundry detergent washing",
        "wash sock towel sheet clothes clothing dryer dry rack fold iron load basket laundromat lint",
    ),
    "the beach": (
        "beach seashell shore",
        "sand sandy wave sea ocean tide coast surf swim shell sandcastle towel sunburn gull bay pier",
    ),
    "a new phone": (
        "phone smartphone charger",
        "screen battery app camera case photo contact call text message wallpaper notification device",
    ),
    "the old bicycle": (
        "bicycle bike saddle cycling",
        "chain tyre tire pedal ride handlebar brake bell spoke frame rusty shed wheel",
    ),
    "a thunderstorm": (
        "thunder lightning thunderstorm storm",
        "rain cloud sky flash crash rumble window power light wind gale downpour tempest bolt",
    ),
    "knitting": (
        "knitting knit yarn needle",
        "wool stitch scarf sweater jumper pattern row purl hat mitten skein craft",
    ),
    "a museum visit": (
        "museum gallery exhibit exhibition",
        "painting statue sculpture artifact collection guide curator label display visitor art history",
    ),
    "doing the dishes": (
        "dish dishes sponge dishwasher",
        "sink soap soapy suds plate cup glass pan pot scrub rinse dry rack towel wash",
    ),
    "a long nap": (
        "nap snooze siesta",
        "sleep asleep pillow blanket afternoon drowsy sleepy doze rest couch sofa dream bed woke",
    ),
    "the train station": (
        "platform railway departure station train",
        "ticket board track commuter passenger timetable carriage arrival delay rail kiosk",
    ),
    "a sunny afternoon": (
        "sunshine sunbeam sunlight sunny",
        "sun afternoon warm bright blue sky shade garden park lawn grass bench heat summer golden",
    ),
    "the grocery store": (
        "supermarket checkout trolley grocery groceries",
        "store shop shopping list cart aisle queue milk bread fruit vegetable produce price bag till",
    ),
    "a letter from a friend": (
        "letter envelope mailbox",
        "friend write wrote reply handwriting stamp post postman page read note card news",
    ),
    "the night sky": (
        "star moon constellation",
        "night sky heavens planet galaxy telescope dark darkness shooting comet orbit astronomy twinkle",
    ),
}
