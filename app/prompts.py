"""The preset prompts every page offers (torch-free, so that a page that runs no model, and the
navigation, can name them without importing the model)."""

PRESETS = {
    "Prose": "The router sends every token to 16 of its 896 experts, and the rest stay idle.",
    "Code": "def mean(values):\n    return sum(values) / len(values)\n",
    "Numbers": "In 2026 the model had 2,779 billion weights; 104 billion of them ran per token.",
    "Punctuation": "Wait -- really? Yes: (a), [b], {c}; \"quoted\" and 'single'!",
}
DEFAULT_PRESET = "Prose"
