package oncall

// The built-in providers' profiles (providers.Profile), registered when
// their packages load: advice about their effects never depends on what
// else a program imports.
import _ "github.com/outboxd/outboxd/providers/bundled"
