"""Google's Gemini API: ``generateContent``, ``streamGenerateContent``, ``countTokens``, models."""
