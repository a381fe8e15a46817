"""The scripted model: a test double of the model provider (an OpenAI-compatible endpoint that
plays scripts) and the check that a scripted run agrees with the product's contract; it imports
only the task language.
"""
